#include "engine/split_backend.h"

#include <algorithm>
#include <array>
#include <chrono>

#include "core/error.h"
#include "engine/device_queue.h"

namespace greta::engine {

// A queue per backend of a split (device_queue.h).
class SplitQueues {
public:
  explicit SplitQueues(size_t n) {
    for (size_t i = 0; i < n; ++i) queues.push_back(std::make_unique<DeviceQueue>());
  }
  DeviceQueue& operator[](int backend) { return *queues.at(size_t(backend)); }
  // Waits for every queue; rethrows the first error, in backend order (an error on one device breaks the hand-offs
  // that the others wait for: those fail after it, with less to say).
  void drain() {
    std::exception_ptr first;
    for (auto& q : queues) {
      try {
        q->wait_idle();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

private:
  std::vector<std::unique_ptr<DeviceQueue>> queues;
};

// Consecutive ops of the model's plan on one backend, as a plan of that backend's.
struct SplitSegment {
  int backend = 0;
  size_t begin = 0, end = 0;                // [begin, end) op indices of the model's plan
  std::unique_ptr<PreparedPlan> prepared;   // the backend's plan of those ops
  std::vector<BufferId> local;              // [model BufferId] -> the segment plan's id; kNoBuffer: not used there
  // Buffers the segment reads before writing them that an earlier segment (on another backend) wrote last: copied
  // from that segment before this one runs.
  struct Handoff {
    BufferId buffer;
    size_t from;  // segment index
    // Host copies for pipelined passes: pass k of this plan uses staging[k % 2] (kPipelineDepth passes in flight).
    std::array<std::vector<float>, SplitBackend::kPipelineDepth> staging;
  };
  std::vector<Handoff> handoffs;
};

class SplitPlan final : public PreparedPlan {
public:
  SplitPlan(Plan plan, std::shared_ptr<SplitQueues> queues) : PreparedPlan(std::move(plan)), queues(std::move(queues)) {}
  ~SplitPlan() override {  // the queues' jobs refer to this plan's segments
    try {
      queues->drain();
    } catch (...) {  // reported to whoever waits next; a plan goes away either way
    }
  }
  std::vector<SplitSegment> segments;
  std::vector<int> fresh;  // [model BufferId] the segment that last wrote it (-1: none since prepare)
  std::vector<std::vector<BufferId>> op_writes;  // [op] written_buffers, once at prepare (execute marks them)
  std::vector<float> staging;  // execute_here's hand-offs
  uint64_t passes = 0;         // pipelined passes posted (picks the hand-offs' staging)
  std::shared_ptr<SplitQueues> queues;
};

namespace {

bool handed_off(BufferRole role) { return role == BufferRole::Scratch || role == BufferRole::Logits; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A step's input, owned: a pipelined pass runs after execute() returns, and the engine reuses its arrays.
struct OwnedStep {
  explicit OwnedStep(const StepInput& in)
      : arrays{{in.tokens.begin(), in.tokens.end()},         {in.positions.begin(), in.positions.end()},
               {in.kv_rows.begin(), in.kv_rows.end()},       {in.seq.begin(), in.seq.end()},
               {in.page_table.begin(), in.page_table.end()}, {in.logit_rows.begin(), in.logit_rows.end()},
               {in.kv_rows_swa.begin(), in.kv_rows_swa.end()}, {in.page_table_swa.begin(), in.page_table_swa.end()}} {}
  StepArrays arrays;
};

}  // namespace

SplitBackend::SplitBackend(std::vector<std::unique_ptr<Backend>> backends, Placement placement)
    : backends_(std::move(backends)), placement_(std::move(placement)) {
  GRETA_CHECK(!backends_.empty() && !placement_.layer_device.empty());
  for (const auto& b : backends_) GRETA_CHECK(b != nullptr);
  for (int d : placement_.layer_device)
    GRETA_CHECK(d >= 0 && size_t(d) < backends_.size(), "placement names backend ", d, " of ", backends_.size());
  queues_ = std::make_shared<SplitQueues>(backends_.size());
}

SplitBackend::~SplitBackend() {
  try {
    queues_->drain();
  } catch (...) {  // nobody left to tell
  }
}

void SplitBackend::finish() {
  in_flight_.clear();
  queues_->drain();
}

CrossingStats SplitBackend::crossings() const {
  std::lock_guard lock(crossings_mutex_);
  return crossings_;
}

void SplitBackend::add_crossing(int64_t copies, uint64_t bytes, double seconds) {
  std::lock_guard lock(crossings_mutex_);
  crossings_.copies += copies;
  crossings_.bytes += bytes;
  crossings_.seconds += seconds;
}

std::string SplitBackend::name() const {
  std::string out = "layer split over ";
  for (size_t i = 0; i < backends_.size(); ++i) out += cat(i ? " + " : "", backends_[i]->name());
  return out;
}

std::string SplitBackend::weights_note() const {
  std::string out;
  for (const auto& b : backends_)
    if (const std::string note = b->weights_note(); !note.empty())
      out += cat(out.empty() ? "" : "; ", b->name(), ": ", note);
  return out;
}

void SplitBackend::set_profiling(bool on) {
  finish();
  Backend::set_profiling(on);
  for (auto& b : backends_) b->set_profiling(on);
}

void SplitBackend::load_weights(std::span<const WeightDesc> weights) {
  GRETA_CHECK(weights_.empty() && !loaded_, "load_weights called twice");
  weights_.assign(weights.begin(), weights.end());
}

std::vector<int> SplitBackend::op_backends(const Plan& plan) const {
  const std::vector<int>& at = placement_.layer_device;
  std::vector<int> out(plan.ops.size());
  bool after_blocks = false;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const int layer = plan.ops[i].layer;
    GRETA_CHECK(layer < int(at.size()), "op ", plan.ops[i].label, " of layer ", layer, " in a ", at.size(),
                "-block placement");
    // Outside the blocks: the embedding before them goes with block 0, the output after them with the last block.
    out[i] = layer >= 0 ? at[size_t(layer)] : after_blocks ? at.back() : at.front();
    after_blocks = after_blocks || layer >= 0;
  }
  return out;
}

// Each backend loads the weights its ops use, renumbered in table order.
void SplitBackend::load_children(const Plan& plan) {
  std::vector<std::vector<uint8_t>> used(backends_.size(), std::vector<uint8_t>(weights_.size(), 0));
  const std::vector<int> backend_of = op_backends(plan);
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    PlanOp op = plan.ops[i];
    const size_t b = size_t(backend_of[i]);
    for_each_ref(op.op, [](BufferId&) {}, [&](WeightId& w) {
      if (w != kNoWeight) used[b].at(size_t(w)) = 1;
    });
  }
  weight_ids_.assign(backends_.size(), std::vector<WeightId>(weights_.size(), kNoWeight));
  for (size_t b = 0; b < backends_.size(); ++b) {
    std::vector<WeightDesc> table;
    for (size_t w = 0; w < weights_.size(); ++w)
      if (used[b][w]) {
        weight_ids_[b][w] = WeightId(table.size());
        table.push_back(weights_[w]);
      }
    if (!table.empty()) backends_[b]->load_weights(table);
  }
  loaded_ = true;
}

std::unique_ptr<PreparedPlan> SplitBackend::prepare(const Plan& plan) {
  finish();
  if (!loaded_) load_children(plan);
  auto p = std::make_unique<SplitPlan>(plan, queues_);
  const size_t n_buffers = plan.buffers.size();
  p->fresh.assign(n_buffers, -1);
  for (const PlanOp& op : plan.ops) p->op_writes.push_back(written_buffers(op));
  const std::vector<int> backend_of = op_backends(plan);

  std::vector<int> last_writer(n_buffers, -1);       // segment index, while walking the segments in order
  std::vector<int> persistent_owner(n_buffers, -1);  // backend
  for (size_t begin = 0; begin < plan.ops.size();) {
    SplitSegment s;
    s.backend = backend_of[begin];
    s.begin = begin;
    s.end = begin + 1;
    while (s.end < plan.ops.size() && backend_of[s.end] == s.backend) ++s.end;
    const size_t index = p->segments.size();

    Plan sub;
    sub.shape = plan.shape;
    sub.vocab = plan.vocab;
    sub.n_logit_rows = plan.n_logit_rows;
    s.local.assign(n_buffers, kNoBuffer);
    std::vector<uint8_t> written(n_buffers, 0);
    const std::vector<WeightId>& weight_ids = weight_ids_[size_t(s.backend)];
    for (size_t i = s.begin; i < s.end; ++i) {
      const PlanOp& op = plan.ops[i];
      for (BufferId b : read_buffers(op)) {
        const bool needed = handed_off(plan.buffers[size_t(b)].role) && !written[size_t(b)] &&
                            last_writer[size_t(b)] >= 0 && size_t(last_writer[size_t(b)]) != index;
        const auto same = [&](const SplitSegment::Handoff& h) { return h.buffer == b; };
        if (needed && std::none_of(s.handoffs.begin(), s.handoffs.end(), same))
          s.handoffs.push_back({b, size_t(last_writer[size_t(b)]), {}});
      }
      for (BufferId b : p->op_writes[i]) written[size_t(b)] = 1;
      PlanOp local = op;
      for_each_ref(
          local.op,
          [&](BufferId& id) {
            if (id == kNoBuffer) return;
            const BufferDecl& decl = plan.buffers[size_t(id)];
            if (decl.role == BufferRole::Persistent) {
              int& owner = persistent_owner[size_t(id)];
              GRETA_CHECK(owner < 0 || owner == s.backend, "persistent buffer ", decl.name, " used on two backends");
              owner = s.backend;
            }
            if (s.local[size_t(id)] == kNoBuffer) {
              s.local[size_t(id)] = BufferId(sub.buffers.size());
              sub.buffers.push_back(decl);
            }
            id = s.local[size_t(id)];
          },
          [&](WeightId& w) {
            if (w == kNoWeight) return;
            const WeightId mapped = weight_ids[size_t(w)];
            GRETA_CHECK(mapped != kNoWeight, "weight ", weights_[size_t(w)].name, " is not loaded on backend ",
                        s.backend);
            w = mapped;
          });
      sub.ops.push_back(std::move(local));
    }
    for (size_t b = 0; b < n_buffers; ++b)
      if (written[b]) last_writer[b] = int(index);
    const auto local_id = [&](BufferId id) { return id == kNoBuffer ? kNoBuffer : s.local[size_t(id)]; };
    sub.tokens = local_id(plan.tokens);
    sub.positions = local_id(plan.positions);
    sub.logits = local_id(plan.logits);
    s.prepared = backends_[size_t(s.backend)]->prepare(sub);
    p->segments.push_back(std::move(s));
    begin = p->segments.back().end;
  }
  return p;
}

void SplitBackend::execute(PreparedPlan& prepared, const StepInput& step, OpRange range) {
  auto& p = dynamic_cast<SplitPlan&>(prepared);
  const Plan& plan = p.plan();
  GRETA_CHECK(range.begin <= range.end && range.end <= plan.ops.size());
  const bool whole = range.begin == 0 && range.end == plan.ops.size();
  // Pipelined when the engine goes on to another pass (or this one can overlap the passes still in flight); a step
  // of one pass (decode) runs here: the queues' thread wake-ups would only add to it.
  if (whole && !profiling_ && p.segments.size() > 1 && (step.another_pass_follows || !in_flight_.empty())) {
    post_pass(p, step);
  } else {
    finish();
    execute_here(p, step, range);
  }
  for (size_t index = 0; index < p.segments.size(); ++index)  // segments are consecutive op ranges, in order
    for (size_t i = std::max(range.begin, p.segments[index].begin); i < std::min(range.end, p.segments[index].end); ++i)
      for (BufferId b : p.op_writes[i]) p.fresh[size_t(b)] = int(index);
}

void SplitBackend::post_pass(SplitPlan& p, const StepInput& step) {
  while (in_flight_.size() >= kPipelineDepth) {  // the oldest pass done: its staging is free again
    in_flight_.front().wait();
    in_flight_.pop_front();
  }
  const auto input = std::make_shared<const OwnedStep>(step);
  const size_t slot = size_t(p.passes++ % kPipelineDepth);
  SplitQueues& queues = *queues_;
  for (SplitSegment& s : p.segments) {
    // Each hand-off: read on the backend that made the buffer, after its segment of this pass and before its
    // segment of the next one (which overwrites it); written on this segment's backend, after its work of the
    // previous pass, which still read the old contents.
    for (SplitSegment::Handoff& h : s.handoffs) {
      const SplitSegment& from = p.segments[h.from];
      const int64_t elems = p.plan().buffers[size_t(h.buffer)].elems;
      std::vector<float>& staging = h.staging[slot];
      staging.resize(size_t(elems));
      auto ready = std::make_shared<std::promise<double>>();  // the read's seconds
      std::shared_future<double> read = ready->get_future().share();
      queues[from.backend].post([this, &from, &staging, buffer = h.buffer, ready] {
        const auto start = std::chrono::steady_clock::now();
        backends_[size_t(from.backend)]->read(*from.prepared, from.local[size_t(buffer)], 0, staging);
        ready->set_value(seconds_since(start));
      });  // if the read throws, `ready` goes with the job unset and the write below fails (broken promise)
      queues[s.backend].post([this, &s, &staging, buffer = h.buffer, read, elems] {
        const double read_seconds = read.get();
        const auto start = std::chrono::steady_clock::now();
        backends_[size_t(s.backend)]->write(*s.prepared, s.local[size_t(buffer)], 0, staging);
        add_crossing(1, uint64_t(elems) * 4, read_seconds + seconds_since(start));
      });
    }
    queues[s.backend].post([this, &s, input] {
      backends_[size_t(s.backend)]->execute(*s.prepared, input->arrays.view(), {0, s.end - s.begin});
    });
  }
  auto done = std::make_shared<std::promise<void>>();
  in_flight_.push_back(done->get_future().share());
  queues[p.segments.back().backend].post([done] { done->set_value(); });
}

void SplitBackend::execute_here(SplitPlan& p, const StepInput& step, OpRange range) {
  const Plan& plan = p.plan();
  for (size_t index = 0; index < p.segments.size(); ++index) {
    SplitSegment& s = p.segments[index];
    const size_t lo = std::max(range.begin, s.begin), hi = std::min(range.end, s.end);
    if (lo >= hi) continue;
    if (lo == s.begin && !s.handoffs.empty()) {  // the segment starts: bring in what the previous backend made
      const auto start = std::chrono::steady_clock::now();
      uint64_t bytes = 0;
      for (const SplitSegment::Handoff& h : s.handoffs) {
        const SplitSegment& from = p.segments[h.from];
        const int64_t elems = plan.buffers[size_t(h.buffer)].elems;
        p.staging.resize(size_t(elems));
        backends_[size_t(from.backend)]->read(*from.prepared, from.local[size_t(h.buffer)], 0, p.staging);
        backends_[size_t(s.backend)]->write(*s.prepared, s.local[size_t(h.buffer)], 0, p.staging);
        bytes += uint64_t(elems) * 4;
      }
      add_crossing(int64_t(s.handoffs.size()), bytes, seconds_since(start));
    }
    Backend& backend = *backends_[size_t(s.backend)];
    backend.execute(*s.prepared, step, {lo - s.begin, hi - s.begin});
    if (profiling_) {  // the segment's op times and spans, under the model's op indices
      std::vector<double>& seconds = s.prepared->mutable_op_seconds();
      for (size_t i = 0; i < seconds.size(); ++i) p.mutable_op_seconds()[s.begin + i] += std::exchange(seconds[i], 0.0);
      for (const PreparedPlan::OpSpan& span : s.prepared->op_spans())
        p.op_spans().push_back({span.op + s.begin, span.start_ns, span.end_ns});
      s.prepared->op_spans().clear();
    }
  }
}

// The segment whose copy of `buffer` holds its latest values (the one that wrote it last, else any that has it).
SplitSegment& SplitBackend::holder(SplitPlan& p, BufferId buffer) {
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < p.fresh.size());
  int at = p.fresh[size_t(buffer)];
  for (size_t i = 0; at < 0 && i < p.segments.size(); ++i)
    if (p.segments[i].local[size_t(buffer)] != kNoBuffer) at = int(i);
  GRETA_CHECK(at >= 0, "buffer ", p.plan().buffers[size_t(buffer)].name, " is used by no op");
  return p.segments[size_t(at)];
}

void SplitBackend::read(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<float> dst) {
  finish();
  SplitSegment& s = holder(dynamic_cast<SplitPlan&>(prepared), buffer);
  backends_[size_t(s.backend)]->read(*s.prepared, s.local[size_t(buffer)], offset, dst);
}

std::span<const float> SplitBackend::view(PreparedPlan& prepared, BufferId buffer, int64_t offset, size_t count) {
  finish();
  SplitSegment& s = holder(dynamic_cast<SplitPlan&>(prepared), buffer);
  return backends_[size_t(s.backend)]->view(*s.prepared, s.local[size_t(buffer)], offset, count);
}

void SplitBackend::write(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<const float> src) {
  finish();
  auto& p = dynamic_cast<SplitPlan&>(prepared);
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < p.fresh.size());
  for (SplitSegment& s : p.segments)  // every copy: whichever segment reads it next sees the new values
    if (s.local[size_t(buffer)] != kNoBuffer) backends_[size_t(s.backend)]->write(*s.prepared, s.local[size_t(buffer)], offset, src);
}

}  // namespace greta::engine
