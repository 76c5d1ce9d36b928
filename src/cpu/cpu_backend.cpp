#include "cpu/cpu_backend.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "model/quants.h"

namespace greta::cpu {

using namespace greta::engine;

CpuBackend::CpuBackend(const CpuOptions& options) : pool_(options.threads), options_(options) {}

std::string CpuBackend::name() const { return cat("cpu (", pool_.size(), pool_.size() == 1 ? " thread)" : " threads)"); }

uint64_t CpuBackend::memory_capacity() const {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : (uint64_t(8) << 30);
}

void CpuBackend::load_weights(std::span<const WeightDesc> weights) {
  GRETA_CHECK(weights_.empty(), "load_weights called twice");
  weights_.reserve(weights.size());
  vectors_.resize(weights.size());
  decoded_.resize(weights.size());
  uint64_t decoded_bytes = 0;
  for (const WeightDesc& d : weights)
    if (d.type != model::GgmlType::F32) decoded_bytes += uint64_t(d.rows) * uint64_t(d.cols) * sizeof(float);
  const bool decode_all = decoded_bytes <= options_.decoded_weight_budget;
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightDesc& d = weights[i];
    GRETA_CHECK(d.rows > 0 && d.cols > 0 && d.data, d.name);
    const uint64_t rb = model::row_bytes(d.type, uint64_t(d.cols));
    GRETA_CHECK(rb * uint64_t(d.rows) == d.bytes, d.name);
    weights_.push_back({d.type, static_cast<const uint8_t*>(d.data), d.rows, d.cols, rb});
    if (d.rows == 1) {  // norm weights and biases are read as fp32 vectors: decode them once
      vectors_[i].resize(size_t(d.cols));
      model::dequantize_row(d.type, d.data, vectors_[i].data(), d.cols);
    }
    if (decode_all && d.type != model::GgmlType::F32) {
      auto& f = decoded_[i];
      f.resize(size_t(d.rows * d.cols));
      pool_.parallel_for(d.rows, [&](int64_t begin, int64_t end, int) {
        for (int64_t r = begin; r < end; ++r) model::dequantize_row(d.type, weights_[i].row(r), f.data() + r * d.cols, d.cols);
      }, 64);
      weights_[i] = {model::GgmlType::F32, reinterpret_cast<const uint8_t*>(f.data()), d.rows, d.cols,
                     uint64_t(d.cols) * sizeof(float)};
    }
  }
}

const WeightView& CpuBackend::weight(WeightId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < weights_.size(), "weight id ", id);
  return weights_[size_t(id)];
}

const float* CpuBackend::vector_weight(WeightId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < vectors_.size() && !vectors_[size_t(id)].empty(), "vector weight id ", id);
  return vectors_[size_t(id)].data();
}

std::unique_ptr<PreparedPlan> CpuBackend::prepare(const Plan& plan) {
  // Refuse plans that cannot fit before allocating anything.
  uint64_t scratch_bytes = 0;
  for (const auto& b : plan.buffers)
    if (b.role != BufferRole::Persistent || !persistent_.count(b.name)) scratch_bytes += uint64_t(b.elems) * 4;
  if (scratch_bytes > memory_capacity())
    fail("cpu: the plan needs ", format_bytes(double(scratch_bytes)), " of buffers, the machine has ",
         format_bytes(double(memory_capacity())));

  auto prepared = std::make_unique<CpuPlan>(plan);
  prepared->f32.resize(plan.buffers.size());
  prepared->i32.resize(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDecl& b = plan.buffers[i];
    if (b.type == ElemType::I32) {
      prepared->i32[i] = std::make_shared<std::vector<int32_t>>(size_t(b.elems), 0);
    } else if (b.role == BufferRole::Persistent) {
      auto& shared = persistent_[b.name];
      if (!shared) shared = std::make_shared<std::vector<float>>(size_t(b.elems), 0.f);
      GRETA_CHECK(int64_t(shared->size()) == b.elems, "persistent buffer ", b.name, " changed size");
      prepared->f32[i] = shared;
    } else {
      prepared->f32[i] = std::make_shared<std::vector<float>>(size_t(b.elems), 0.f);
    }
  }
  return prepared;
}

float* CpuBackend::f32(CpuPlan& plan, BufferId id) {
  GRETA_CHECK(id >= 0 && size_t(id) < plan.f32.size() && plan.f32[size_t(id)], "f32 buffer ", id);
  return plan.f32[size_t(id)]->data();
}

const int32_t* CpuBackend::i32(CpuPlan& plan, BufferId id) {
  GRETA_CHECK(id >= 0 && size_t(id) < plan.i32.size() && plan.i32[size_t(id)], "i32 buffer ", id);
  return plan.i32[size_t(id)]->data();
}

void CpuBackend::execute(PreparedPlan& prepared, const StepInput& step, OpRange range) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  const Plan& p = plan.plan();
  const int64_t n = p.shape.n_tokens;
  GRETA_CHECK(int64_t(step.tokens.size()) == n, "step has ", step.tokens.size(), " tokens, plan ", n);
  GRETA_CHECK(step.start_pos >= 0 && step.start_pos + n <= p.shape.ctx, "start ", step.start_pos);
  GRETA_CHECK(range.begin <= range.end && range.end <= p.ops.size());

  // The step input: token ids and their positions.
  auto& tokens = *plan.i32[size_t(p.tokens)];
  auto& positions = *plan.i32[size_t(p.positions)];
  for (int64_t t = 0; t < n; ++t) {
    tokens[size_t(t)] = step.tokens[size_t(t)];
    positions[size_t(t)] = int32_t(step.start_pos + t);
  }

  for (size_t i = range.begin; i < range.end; ++i) {
    if (!profiling_) {
      run_op(plan, p.ops[i]);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    run_op(plan, p.ops[i]);
    const auto end = std::chrono::steady_clock::now();
    plan.mutable_op_seconds()[i] += std::chrono::duration<double>(end - start).count();
    const auto ns = [](auto t) { return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count()); };
    plan.op_spans().push_back({i, ns(start), ns(end)});
  }
}

void CpuBackend::run_op(CpuPlan& plan, const PlanOp& op) {
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp>) {
          embed(pool_, weight(o.table), i32(plan, o.tokens), o.n_tokens, f32(plan, o.out));
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          rmsnorm(pool_, f32(plan, o.in) + o.in_row_offset * o.width, vector_weight(o.weight), f32(plan, o.out),
                  o.rows, o.width, o.eps);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          const WeightView& w = weight(o.weight);
          GRETA_CHECK(w.cols == o.in_features && w.rows == o.out_features, op.label);
          matmul(pool_, w, f32(plan, o.in), f32(plan, o.out), o.n_tokens);
        } else if constexpr (std::is_same_v<T, AddBiasOp>) {
          add_bias(pool_, f32(plan, o.x), vector_weight(o.bias), o.rows, o.width);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          rope(pool_, f32(plan, o.x), i32(plan, o.positions), o.n_tokens, o.n_heads, o.head_dim, o.rope_dims,
               o.pairing, o.base, o.freq_scale,
               o.freq_factors == kNoWeight ? nullptr : vector_weight(o.freq_factors));
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          kv_write(f32(plan, o.src), f32(plan, o.cache), i32(plan, o.positions), o.n_tokens, o.width, o.ctx);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          attention(pool_, {f32(plan, o.q), f32(plan, o.k_cache), f32(plan, o.v_cache), i32(plan, o.positions),
                            f32(plan, o.out), o.n_tokens, o.n_heads, o.n_kv_heads, o.head_dim, o.head_dim_v, o.ctx,
                            o.scale});
        } else if constexpr (std::is_same_v<T, SwiGluOp>) {
          swiglu(pool_, f32(plan, o.gate), f32(plan, o.up), f32(plan, o.out), o.elems);
        } else {
          static_assert(std::is_same_v<T, AddOp>);
          add(pool_, f32(plan, o.x), f32(plan, o.y), o.elems);
        }
      },
      op.op);
}

void CpuBackend::read(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<float> dst) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  const float* src = f32(plan, buffer);
  GRETA_CHECK(offset >= 0 && offset + int64_t(dst.size()) <= plan.plan().buffers[size_t(buffer)].elems);
  std::memcpy(dst.data(), src + offset, dst.size_bytes());
}

void CpuBackend::write(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<const float> src) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  float* dst = f32(plan, buffer);
  GRETA_CHECK(offset >= 0 && offset + int64_t(src.size()) <= plan.plan().buffers[size_t(buffer)].elems);
  std::memcpy(dst + offset, src.data(), src.size_bytes());
}

}  // namespace greta::cpu
