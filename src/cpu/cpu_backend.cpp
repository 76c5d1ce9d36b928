#include "cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "engine/elem_convert.h"
#include "engine/kv_q8.h"
#include "model/quants.h"

namespace greta::cpu {

using namespace greta::engine;

HostBuffer::HostBuffer(ElemType t, int64_t elems) : type(t) {
  if (t == ElemType::F32) f32.assign(size_t(elems), 0.f);
  else if (t == ElemType::I32) i32.assign(size_t(elems), 0);
  else if (t == ElemType::F16) f16.assign(size_t(elems), 0);
  else {
    GRETA_CHECK(elems % kKvQ8Block == 0, "q8_0 buffer of ", elems, " elements");
    q8.assign(size_t(elems / kKvQ8Block * kKvQ8Words), 0);
  }
}

int64_t HostBuffer::elems() const {
  switch (type) {
    case ElemType::F32: return int64_t(f32.size());
    case ElemType::I32: return int64_t(i32.size());
    case ElemType::F16: return int64_t(f16.size());
    case ElemType::Q8_0: return int64_t(q8.size()) / kKvQ8Words * kKvQ8Block;
  }
  return 0;
}

CpuBackend::CpuBackend(const CpuOptions& options) : pool_(options.threads), options_(options) {}

std::string CpuBackend::name() const { return cat("cpu (", pool_.size(), pool_.size() == 1 ? " thread)" : " threads)"); }

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : (uint64_t(8) << 30);
}

uint64_t CpuBackend::memory_capacity() const { return physical_memory_bytes(); }

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
  uint64_t new_bytes = 0;
  for (const auto& b : plan.buffers) {
    const auto it = persistent_.find(b.name);
    const int64_t have = b.role == BufferRole::Persistent && it != persistent_.end() ? it->second->elems() : 0;
    if (b.elems > have) new_bytes += elem_bytes(b.type, b.elems);
  }
  if (new_bytes > memory_capacity())
    fail("cpu: the plan needs ", format_bytes(double(new_bytes)), " of buffers, the machine has ",
         format_bytes(double(memory_capacity())));

  auto prepared = std::make_unique<CpuPlan>(plan);
  prepared->buffers.resize(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDecl& b = plan.buffers[i];
    if (b.role != BufferRole::Persistent) {
      prepared->buffers[i] = std::make_shared<HostBuffer>(b.type, b.elems);
      continue;
    }
    auto& shared = persistent_[b.name];
    if (shared && shared->type != b.type) fail("cpu: persistent buffer ", b.name, " changed its element type");
    if (!shared || shared->elems() < b.elems) {  // new, or the page pool grew: keep what it holds
      auto grown = std::make_shared<HostBuffer>(b.type, b.elems);
      if (shared) {
        std::copy(shared->f32.begin(), shared->f32.end(), grown->f32.begin());
        std::copy(shared->f16.begin(), shared->f16.end(), grown->f16.begin());
        std::copy(shared->q8.begin(), shared->q8.end(), grown->q8.begin());
      }
      shared = std::move(grown);
    }
    GRETA_CHECK(shared->elems() == b.elems, "persistent buffer ", b.name, " is larger than the plan says");
    prepared->buffers[i] = shared;
  }
  return prepared;
}

float* CpuBackend::f32(CpuPlan& plan, BufferId id) {
  GRETA_CHECK(id >= 0 && size_t(id) < plan.buffers.size() && plan.buffers[size_t(id)]->type == ElemType::F32,
              "f32 buffer ", id);
  return plan.buffers[size_t(id)]->f32.data();
}

const int32_t* CpuBackend::i32(CpuPlan& plan, BufferId id) { return i32_mut(plan, id); }

int32_t* CpuBackend::i32_mut(CpuPlan& plan, BufferId id) {
  GRETA_CHECK(id >= 0 && size_t(id) < plan.buffers.size() && plan.buffers[size_t(id)]->type == ElemType::I32,
              "i32 buffer ", id);
  return plan.buffers[size_t(id)]->i32.data();
}

CacheView CpuBackend::cache(CpuPlan& plan, BufferId id) {  // rows: set by the op that knows the row width
  GRETA_CHECK(id >= 0 && size_t(id) < plan.buffers.size(), "cache buffer ", id);
  HostBuffer& b = *plan.buffers[size_t(id)];
  switch (b.type) {
    case ElemType::F32: return {b.f32.data(), b.type, 0};
    case ElemType::F16: return {b.f16.data(), b.type, 0};
    case ElemType::Q8_0: return {b.q8.data(), b.type, 0};
    case ElemType::I32: break;
  }
  fail("cpu: cache buffer ", plan.plan().buffers[size_t(id)].name, " has type i32");
}

void CpuBackend::execute(PreparedPlan& prepared, const StepInput& step, OpRange range) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  const Plan& p = plan.plan();
  GRETA_CHECK(range.begin <= range.end && range.end <= p.ops.size());

  // The step input: every step-input buffer from the span of its role.
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    if (!is_step_input(p.buffers[i].role)) continue;
    const std::span<const int32_t> in = step.for_role(p.buffers[i].role);
    GRETA_CHECK(int64_t(in.size()) == p.buffers[i].elems, "step input ", p.buffers[i].name, " has ", in.size(),
                " values, the plan ", p.buffers[i].elems);
    std::copy(in.begin(), in.end(), plan.buffers[i]->i32.begin());
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
          if (o.scale != 1.f) {
            float* out = f32(plan, o.out);
            for (int64_t i = 0; i < o.n_tokens * o.dim; ++i) out[i] *= o.scale;
          }
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
               o.freq_factors == kNoWeight ? nullptr : vector_weight(o.freq_factors),
               RopeYarn{o.ext_factor, o.attn_factor, o.yarn_low, o.yarn_high});
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          CacheView c = cache(plan, o.cache);
          c.rows = o.cache_rows;
          GRETA_CHECK(plan.buffers[size_t(o.cache)]->elems() >= o.cache_rows * o.width, op.label);
          kv_write(f32(plan, o.src), c, i32(plan, o.rows), o.n_tokens, o.width);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          CacheView k = cache(plan, o.k_cache), v = cache(plan, o.v_cache);
          k.rows = v.rows = o.cache_rows;
          GRETA_CHECK(plan.buffers[size_t(o.k_cache)]->elems() >= o.cache_rows * o.n_kv_heads * o.head_dim &&
                          plan.buffers[size_t(o.v_cache)]->elems() >= o.cache_rows * o.n_kv_heads * o.head_dim_v,
                      op.label);
          attention(pool_, {f32(plan, o.q), k, v, i32(plan, o.positions), i32(plan, o.seq), i32(plan, o.page_table),
                            f32(plan, o.out), o.n_tokens, o.n_heads, o.n_kv_heads, o.head_dim, o.head_dim_v, o.n_seqs,
                            o.page_size, o.pages_per_seq, o.scale, o.window,
                            o.sinks == kNoWeight ? nullptr : vector_weight(o.sinks)});
        } else if constexpr (std::is_same_v<T, GatherRowsOp>) {
          const int64_t in_rows = plan.buffers[size_t(o.in)]->elems() / o.width;
          gather_rows(f32(plan, o.in), i32(plan, o.rows), f32(plan, o.out), o.n_rows, o.width, in_rows);
        } else if constexpr (std::is_same_v<T, GluOp>) {
          glu(pool_, o.kind, f32(plan, o.gate), f32(plan, o.up), f32(plan, o.out), o.elems, o.alpha, o.limit);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          moe_route(pool_, f32(plan, o.logits), i32_mut(plan, o.experts), f32(plan, o.weights), o.n_tokens,
                    o.n_experts, o.k, o.gating, o.normalize);
        } else if constexpr (std::is_same_v<T, MoeMatMulOp>) {
          moe_matmul(pool_, {weight(o.weight), o.bias == kNoWeight ? WeightView{} : weight(o.bias), f32(plan, o.in),
                             i32(plan, o.experts), f32(plan, o.out), o.n_tokens, o.k, o.in_features, o.out_features,
                             o.n_experts, o.per_slot_input});
        } else if constexpr (std::is_same_v<T, MoeCombineOp>) {
          moe_combine(pool_, f32(plan, o.in), f32(plan, o.weights), f32(plan, o.out), o.n_tokens, o.k, o.width);
        } else {
          static_assert(std::is_same_v<T, AddOp>);
          add(pool_, f32(plan, o.x), f32(plan, o.y), o.elems);
        }
      },
      op.op);
}

void CpuBackend::read(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<float> dst) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < plan.buffers.size(), "buffer ", buffer);
  const HostBuffer& b = *plan.buffers[size_t(buffer)];
  GRETA_CHECK(offset >= 0 && offset + int64_t(dst.size()) <= plan.plan().buffers[size_t(buffer)].elems);
  if (b.type == ElemType::F16) return floats_from_elems(b.type, b.f16.data() + offset, dst);
  if (b.type == ElemType::Q8_0) {  // whole blocks
    GRETA_CHECK(offset % kKvQ8Block == 0, "q8_0 read from inside a block");
    return floats_from_elems(b.type, b.q8.data() + offset / kKvQ8Block * kKvQ8Words, dst);
  }
  if (b.type == ElemType::I32) {  // ids (MoE experts) as floats: exact below 2^24
    std::transform(b.i32.begin() + offset, b.i32.begin() + offset + int64_t(dst.size()), dst.begin(),
                   [](int32_t v) { return float(v); });
    return;
  }
  std::memcpy(dst.data(), b.f32.data() + offset, dst.size_bytes());
}

std::span<const float> CpuBackend::view(PreparedPlan& prepared, BufferId buffer, int64_t offset, size_t count) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < plan.buffers.size(), "buffer ", buffer);
  const HostBuffer& b = *plan.buffers[size_t(buffer)];
  GRETA_CHECK(offset >= 0 && offset + int64_t(count) <= plan.plan().buffers[size_t(buffer)].elems);
  if (b.type != ElemType::F32) return {};
  return std::span<const float>(b.f32).subspan(size_t(offset), count);
}

void CpuBackend::write(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<const float> src) {
  auto& plan = dynamic_cast<CpuPlan&>(prepared);
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < plan.buffers.size(), "buffer ", buffer);
  HostBuffer& b = *plan.buffers[size_t(buffer)];
  GRETA_CHECK(offset >= 0 && offset + int64_t(src.size()) <= plan.plan().buffers[size_t(buffer)].elems);
  if (b.type == ElemType::F16) return elems_from_floats(b.type, src, b.f16.data() + offset);
  if (b.type == ElemType::Q8_0) {  // whole blocks only
    GRETA_CHECK(offset % kKvQ8Block == 0 && int64_t(src.size()) % kKvQ8Block == 0, "q8_0 write of partial blocks");
    return elems_from_floats(b.type, src, b.q8.data() + offset / kKvQ8Block * kKvQ8Words);
  }
  if (b.type == ElemType::I32) {  // ids (MoE experts; verify's resync) from floats
    std::transform(src.begin(), src.end(), b.i32.begin() + offset, [](float v) { return int32_t(v); });
    return;
  }
  std::memcpy(b.f32.data() + offset, src.data(), src.size_bytes());
}

}  // namespace greta::cpu
