#include "engine/op_case.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "model/quants.h"

namespace greta::engine {

namespace {
std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
}  // namespace

OpCase::OpCase(int64_t n_tokens, int64_t ctx, int64_t n_seqs) {
  GRETA_CHECK(n_tokens > 0 && ctx >= 1 && n_seqs >= 1);
  plan.shape = PlanShape::single(n_tokens, ctx, true, ElemType::F32);
  plan.shape.n_seqs = n_seqs;
  plan.shape.kv.n_pages = n_seqs * plan.shape.kv.pages_per_seq + 1;
  plan.n_logit_rows = n_tokens;
  plan.tokens = plan.add_buffer("tokens", ElemType::I32, BufferRole::Tokens, n_tokens);
  plan.positions = plan.add_buffer("positions", ElemType::I32, BufferRole::Positions, n_tokens);
  kv_rows = plan.add_buffer("kv_rows", ElemType::I32, BufferRole::KvRows, n_tokens);
  seq = plan.add_buffer("seq", ElemType::I32, BufferRole::SeqIndex, n_tokens);
  page_table = plan.add_buffer("page_table", ElemType::I32, BufferRole::PageTable, n_seqs * plan.shape.kv.pages_per_seq);
  tokens.assign(size_t(n_tokens), 0);
}

BufferId OpCase::input(const std::string& name, int64_t elems, uint32_t seed, float scale, ElemType type) {
  GRETA_CHECK(type == ElemType::F32 || type == ElemType::F16 || (type == ElemType::Q8_0 && elems % 32 == 0));
  const BufferId id = plan.add_buffer(name, type, BufferRole::Scratch, elems);
  inputs[id] = uniform(size_t(elems), seed, -scale, scale);
  return id;
}

void OpCase::sequences(std::span<const int64_t> lens, std::span<const int64_t> starts, uint32_t seed) {
  const PlanShape& s = plan.shape;
  const int64_t P = s.kv.page_size, n_seq = int64_t(lens.size());
  GRETA_CHECK(lens.size() == starts.size() && n_seq >= 1 && n_seq <= s.n_seqs);
  int64_t total = 0;
  for (int64_t l : lens) total += l;
  GRETA_CHECK(total <= s.n_tokens && (total == s.n_tokens || n_seq < s.n_seqs), "padding needs a spare sequence row");
  std::vector<int32_t> free_pages;
  for (int64_t p = 1; p < s.kv.n_pages; ++p) free_pages.push_back(int32_t(p));
  std::shuffle(free_pages.begin(), free_pages.end(), std::mt19937(seed));
  StepArrays a;
  a.tokens = tokens;
  a.positions.assign(size_t(s.n_tokens), 0);
  a.kv_rows.assign(size_t(s.n_tokens), 0);
  a.seq.assign(size_t(s.n_tokens), int32_t(s.n_seqs - 1));
  a.page_table.assign(size_t(s.n_seqs * s.kv.pages_per_seq), 0);
  size_t next_page = 0;
  int64_t t = 0;
  for (int64_t i = 0; i < n_seq; ++i) {
    const int64_t end = starts[size_t(i)] + lens[size_t(i)];
    GRETA_CHECK(lens[size_t(i)] >= 1 && starts[size_t(i)] >= 0 && end <= s.kv.pages_per_seq * P);
    for (int64_t pg = 0; pg < (end + P - 1) / P; ++pg) {
      GRETA_CHECK(next_page < free_pages.size(), "OpCase: the page pool is too small");
      a.page_table[size_t(i * s.kv.pages_per_seq + pg)] = free_pages[next_page++];
    }
    for (int64_t pos = starts[size_t(i)]; pos < end; ++pos, ++t) {
      a.positions[size_t(t)] = int32_t(pos);
      a.seq[size_t(t)] = int32_t(i);
      a.kv_rows[size_t(t)] = int32_t(int64_t(a.page_table[size_t(i * s.kv.pages_per_seq + pos / P)]) * P + pos % P);
    }
  }
  step = std::move(a);
}

int64_t OpCase::cache_row(int64_t s, int64_t pos) const {
  const int64_t P = plan.shape.kv.page_size;
  if (!step) return (1 + pos / P) * P + pos % P;
  return int64_t(step->page_table[size_t(s * plan.shape.kv.pages_per_seq + pos / P)]) * P + pos % P;
}

BufferId OpCase::output(const std::string& name, int64_t elems) {
  return plan.add_buffer(name, ElemType::F32, BufferRole::Scratch, elems);
}

WeightId OpCase::weight(const std::string& name, model::GgmlType type, int64_t rows, int64_t cols, uint32_t seed,
                        float lo, float hi) {
  const uint64_t rb = model::row_bytes(type, uint64_t(cols));
  std::vector<uint8_t> bytes(rb * uint64_t(rows));
  const auto values = uniform(size_t(rows * cols), seed, lo, hi);
  for (int64_t r = 0; r < rows; ++r) model::quantize_row(type, values.data() + r * cols, bytes.data() + r * rb, cols);
  weight_bytes.push_back(std::move(bytes));
  weights.push_back({name, type, rows, cols, nullptr, rb * uint64_t(rows)});
  return WeightId(weights.size() - 1);
}

void OpCase::add(std::string label, OpVariant op) { plan.ops.push_back({std::move(label), -1, std::move(op)}); }

std::unique_ptr<PreparedPlan> OpCase::load_and_prepare(Backend& backend) {
  for (size_t i = 0; i < weights.size(); ++i) weights[i].data = weight_bytes[i].data();
  backend.load_weights(weights);
  return backend.prepare(plan);
}

void OpCase::run(Backend& backend, PreparedPlan& prepared) {
  for (const auto& [id, values] : inputs) backend.write(prepared, id, 0, values);
  if (step) {
    backend.execute(prepared, step->view());
    return;
  }
  const StepArrays single = single_sequence_step(plan, tokens, start_pos);
  backend.execute(prepared, single.view());
}

std::vector<float> OpCase::read(Backend& backend, PreparedPlan& prepared, BufferId buffer) {
  std::vector<float> result(size_t(plan.buffers[size_t(buffer)].elems));
  backend.read(prepared, buffer, 0, result);
  return result;
}

std::vector<float> OpCase::run_once(Backend& backend, BufferId out) {
  auto prepared = load_and_prepare(backend);
  run(backend, *prepared);
  return read(backend, *prepared, out);
}

CacheFlush::CacheFlush(Backend& backend) : backend_(backend) {
  constexpr int64_t kElems = int64_t(16) << 20;  // floats per buffer
  Plan flush;
  flush.shape = PlanShape::single(1, 1, true, ElemType::F32);
  flush.tokens = flush.add_buffer("tokens", ElemType::I32, BufferRole::Tokens, 1);
  flush.positions = flush.add_buffer("positions", ElemType::I32, BufferRole::Positions, 1);
  const BufferId a = flush.add_buffer("flush a", ElemType::F32, BufferRole::Scratch, kElems);
  const BufferId b = flush.add_buffer("flush b", ElemType::F32, BufferRole::Scratch, kElems);
  flush.ops.push_back({"l2 flush", -1, AddOp{a, b, kElems}});
  prepared_ = backend.prepare(flush);
}

void CacheFlush::run() {
  const int32_t token = 0, position = 0;
  StepInput step;
  step.tokens = std::span<const int32_t>(&token, 1);
  step.positions = std::span<const int32_t>(&position, 1);
  backend_.execute(*prepared_, step);
  prepared_->op_spans().clear();
}

}  // namespace greta::engine
