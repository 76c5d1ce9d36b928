// The HIP backend (see hip_backend.h).
#include "hip/hip_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "model/quants.h"

namespace greta::hip {

using namespace greta::engine;

namespace {
constexpr size_t kStagingBytes = size_t(32) << 20;
constexpr int64_t kPrefillAttentionMinTokens = 16;
}  // namespace

// A plan's device buffers. Graph members come last: the graph references the buffers' addresses.
class HipPlan : public PreparedPlan {
public:
  using PreparedPlan::PreparedPlan;
  std::vector<std::shared_ptr<PoolBuffer>> buffers;  // by BufferId
  std::unique_ptr<PoolBuffer> gemm_a_half, gemm_inv_scale, attention_partials;
  std::unique_ptr<PinnedMemory> step_input;  // tokens | positions, n_tokens int32 each
  std::unique_ptr<Event> op_start, op_end;   // profiling
  Graph graph;
  bool graph_failed = false;

  float* f32(BufferId id) const { return reinterpret_cast<float*>(buffers[size_t(id)]->data()); }
  int32_t* i32(BufferId id) const { return reinterpret_cast<int32_t*>(buffers[size_t(id)]->data()); }
};

HipBackend::HipBackend(const HipBackendOptions& options) : options_(options) {
  int count = 0;
  GRETA_GPU_CHECK(gpuGetDeviceCount(&count), "counting devices");
  if (options.device < 0 || options.device >= count)
    fail("hip: no device ", options.device, " (", count, count == 1 ? " device)" : " devices)");
  GRETA_GPU_CHECK(gpuSetDevice(options.device), "selecting the device");
  props_ = query_device(options.device);
  if (const char* e = std::getenv("GRETA_HIP_NO_GRAPHS"); e && *e && std::strcmp(e, "0") != 0)
    options_.use_graphs = false;
  stream_ = std::make_unique<Stream>();
  pool_ = std::make_unique<MemoryPool>();
  ctx_ = {stream_->get(), props_.wave_size, props_.mma};
  // A kernel launch tells whether this build carries code for the device.
  try {
    launch_probe(ctx_);
    stream_->synchronize();
  } catch (const Error& e) {
    fail("hip: this plugin has no code for ", props_.name, " (", props_.arch, "); it was built for ",
         GRETA_HIP_ARCH_LIST, " (", e.what(), ")");
  }
  for (int i = 0; i < 2; ++i) {
    staging_[i] = std::make_unique<PinnedMemory>(kStagingBytes);
    staging_done_[i] = std::make_unique<Event>(false);
    staging_done_[i]->record(*stream_);
  }
}

HipBackend::~HipBackend() {
  if (stream_) (void)gpuStreamSynchronize(stream_->get());
}

std::string HipBackend::name() const {
  return cat("hip: ", props_.name, " (", props_.arch, ", ", props_.compute_units, " CUs, wave", props_.wave_size,
             props_.mma ? ", matrix cores)" : ")");
}

uint64_t HipBackend::memory_capacity() const {
  size_t free_b = 0, total = 0;
  if (gpuMemGetInfo(&free_b, &total) != gpuSuccess) return props_.memory_bytes;
  // What the engine may still place: free memory plus what this backend already holds (its weights and caches are
  // part of the budget the engine computes), keeping 5% for the runtime.
  return uint64_t(double(free_b + pool_->reserved_bytes()) * 0.95);
}

void HipBackend::upload(uint8_t* dst, const void* src, size_t bytes) {
  // Double-buffered through pinned memory: copy into one staging buffer while the other's transfer runs.
  const auto* s = static_cast<const uint8_t*>(src);
  static_assert(kStagingBytes % 2 == 0);
  for (size_t done = 0, i = 0; done < bytes; ++i) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    const int b = int(i % 2);
    staging_done_[b]->synchronize();
    std::memcpy(staging_[b]->data(), s + done, n);
    GRETA_GPU_CHECK(gpuMemcpyAsync(dst + done, staging_[b]->data(), n, gpuMemcpyHostToDevice, stream_->get()),
                    "uploading weights");
    staging_done_[b]->record(*stream_);
    done += n;
  }
}

void HipBackend::load_weights(std::span<const WeightDesc> weights) {
  GRETA_CHECK(weights_.empty(), "load_weights called twice");
  weights_.resize(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightDesc& d = weights[i];
    GRETA_CHECK(d.rows > 0 && d.cols > 0 && d.data, d.name);
    const WType type = static_cast<WType>(d.type);
    if (!is_supported(type)) fail("hip: weight ", d.name, " has type ", model::type_name(d.type), ", which the HIP kernels do not decode");
    const uint64_t rb = row_bytes(type, d.cols);
    GRETA_CHECK(rb == model::row_bytes(d.type, uint64_t(d.cols)) && rb * uint64_t(d.rows) == d.bytes, d.name);
    if (d.rows > 1 && type == WType::F32) f16_attention_ = false;  // an F32 model keeps f32 activations
    Weight& w = weights_[i];
    w.memory = std::make_unique<PoolBuffer>(*pool_, d.bytes);
    upload(w.memory->data(), d.data, d.bytes);
    w.view = {type, w.memory->data(), d.rows, d.cols, rb};
    if (d.rows == 1) {  // norms, biases, rope factors: fp32 on the device
      std::vector<float> v(size_t(d.cols));
      model::dequantize_row(d.type, d.data, v.data(), d.cols);
      w.vector = std::make_unique<PoolBuffer>(*pool_, v.size() * sizeof(float));
      upload(w.vector->data(), v.data(), v.size() * sizeof(float));
    }
  }
  stream_->synchronize();
}

const HipBackend::Weight& HipBackend::weight(WeightId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < weights_.size(), "weight id ", id);
  return weights_[size_t(id)];
}

bool HipBackend::use_gemm(WType type, int64_t n_tokens) const {
  return ctx_.mma && type != WType::F32 && n_tokens > kMatvecTokens;
}

bool HipBackend::use_flash_attention(const AttentionArgs& a) const {
  return f16_attention_ && a.n_tokens >= kPrefillAttentionMinTokens && attention_prefill_supported(ctx_, a);
}

const float* HipBackend::vector_weight(WeightId id) const {
  const Weight& w = weight(id);
  GRETA_CHECK(w.vector, "weight ", id, " is not a vector");
  return reinterpret_cast<const float*>(w.vector->data());
}

namespace {

// Every buffer an op touches must hold what the op reads or writes: a bad plan is an internal error, never an
// out-of-bounds access on the device.
void check_op_fits(const Plan& p, const PlanOp& op) {
  auto need = [&](BufferId id, int64_t elems, ElemType type) {
    GRETA_CHECK(id >= 0 && size_t(id) < p.buffers.size(), op.label, ": buffer ", id);
    const BufferDecl& b = p.buffers[size_t(id)];
    GRETA_CHECK(b.type == type && b.elems >= elems, op.label, ": buffer ", b.name, " has ", b.elems, " elements, needs ",
                elems);
  };
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp>) {
          need(o.tokens, o.n_tokens, ElemType::I32);
          need(o.out, o.n_tokens * o.dim, ElemType::F32);
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          need(o.in, (o.in_row_offset + o.rows) * o.width, ElemType::F32);
          need(o.out, o.rows * o.width, ElemType::F32);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          need(o.in, o.n_tokens * o.in_features, ElemType::F32);
          need(o.out, o.n_tokens * o.out_features, ElemType::F32);
        } else if constexpr (std::is_same_v<T, AddBiasOp>) {
          need(o.x, o.rows * o.width, ElemType::F32);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          GRETA_CHECK(o.rope_dims <= o.head_dim && o.rope_dims % 2 == 0, op.label);
          need(o.x, o.n_tokens * o.n_heads * o.head_dim, ElemType::F32);
          need(o.positions, o.n_tokens, ElemType::I32);
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          need(o.src, o.n_tokens * o.width, ElemType::F32);
          need(o.cache, o.ctx * o.width, ElemType::F32);
          need(o.positions, o.n_tokens, ElemType::I32);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          GRETA_CHECK(o.n_kv_heads > 0 && o.n_heads % o.n_kv_heads == 0, op.label);
          need(o.q, o.n_tokens * o.n_heads * o.head_dim, ElemType::F32);
          need(o.k_cache, o.ctx * o.n_kv_heads * o.head_dim, ElemType::F32);
          need(o.v_cache, o.ctx * o.n_kv_heads * o.head_dim_v, ElemType::F32);
          need(o.positions, o.n_tokens, ElemType::I32);
          need(o.out, o.n_tokens * o.n_heads * o.head_dim_v, ElemType::F32);
        } else if constexpr (std::is_same_v<T, SwiGluOp>) {
          need(o.gate, o.elems, ElemType::F32);
          need(o.up, o.elems, ElemType::F32);
          need(o.out, o.elems, ElemType::F32);
        } else {
          need(o.x, o.elems, ElemType::F32);
          need(o.y, o.elems, ElemType::F32);
        }
      },
      op.op);
}

AttentionArgs attention_args(const HipPlan& plan, const AttentionOp& o) {
  return {plan.f32(o.q), plan.f32(o.k_cache), plan.f32(o.v_cache), plan.i32(o.positions), plan.f32(o.out),
          o.n_tokens,    o.n_heads,           o.n_kv_heads,        o.head_dim,            o.head_dim_v,
          o.ctx,         o.scale};
}

}  // namespace

std::unique_ptr<PreparedPlan> HipBackend::prepare(const Plan& plan) {
  GRETA_CHECK(plan.tokens >= 0 && plan.positions >= 0, "plan without step input buffers");
  uint64_t bytes = 0;
  for (const auto& b : plan.buffers) {
    GRETA_CHECK(b.elems >= 0, b.name);
    if (b.role != BufferRole::Persistent || !persistent_.count(b.name)) bytes += uint64_t(b.elems) * 4;
  }
  if (bytes > memory_capacity())
    fail("hip: the plan needs ", format_bytes(double(bytes)), " of buffers, the device has ",
         format_bytes(double(memory_capacity())), " left");

  auto prepared = std::make_unique<HipPlan>(plan);
  prepared->buffers.resize(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDecl& b = plan.buffers[i];
    const size_t n = size_t(std::max<int64_t>(b.elems, 1)) * 4;
    if (b.role == BufferRole::Persistent) {
      auto& shared = persistent_[b.name];
      if (!shared) {
        shared = std::make_shared<PoolBuffer>(*pool_, n);
        GRETA_GPU_CHECK(gpuMemsetAsync(shared->data(), 0, n, stream_->get()), "clearing the KV cache");
      }
      GRETA_CHECK(shared->size() >= n, "persistent buffer ", b.name, " changed size");
      prepared->buffers[i] = shared;
    } else {
      prepared->buffers[i] = std::make_shared<PoolBuffer>(*pool_, n);
      GRETA_GPU_CHECK(gpuMemsetAsync(prepared->buffers[i]->data(), 0, n, stream_->get()), "clearing a buffer");
    }
  }
  // Scratch sized by the largest op that needs it.
  int64_t a_half = 0, inv_scale = 0, partials = 0;
  for (const PlanOp& op : plan.ops) {
    check_op_fits(plan, op);
    if (const auto* m = std::get_if<MatMulOp>(&op.op)) {
      const Weight& w = weight(m->weight);
      GRETA_CHECK(w.view.cols == m->in_features && w.view.rows == m->out_features, op.label);
      a_half = std::max(a_half, m->n_tokens * m->in_features);
      inv_scale = std::max(inv_scale, m->n_tokens);
    } else if (const auto* a = std::get_if<AttentionOp>(&op.op)) {
      const AttentionArgs args = attention_args(*prepared, *a);
      partials = std::max(partials, attention_partials_elems(args, attention_splits(a->ctx)));
    } else if (const auto* e = std::get_if<EmbedOp>(&op.op)) {
      GRETA_CHECK(weight(e->table).view.cols == e->dim, op.label);
    } else if (const auto* r = std::get_if<RmsNormOp>(&op.op)) {
      GRETA_CHECK(weight(r->weight).view.cols == r->width, op.label);
      vector_weight(r->weight);
    } else if (const auto* b = std::get_if<AddBiasOp>(&op.op)) {
      GRETA_CHECK(weight(b->bias).view.cols == b->width, op.label);
      vector_weight(b->bias);
    } else if (const auto* ro = std::get_if<RopeOp>(&op.op); ro && ro->freq_factors != kNoWeight) {
      GRETA_CHECK(weight(ro->freq_factors).view.cols >= ro->rope_dims / 2, op.label);
      vector_weight(ro->freq_factors);
    }
  }
  if (a_half > 0) {
    prepared->gemm_a_half = std::make_unique<PoolBuffer>(*pool_, size_t(a_half) * 2);
    prepared->gemm_inv_scale = std::make_unique<PoolBuffer>(*pool_, size_t(inv_scale) * 4);
  }
  if (partials > 0) prepared->attention_partials = std::make_unique<PoolBuffer>(*pool_, size_t(partials) * 4);
  prepared->step_input = std::make_unique<PinnedMemory>(size_t(std::max<int64_t>(plan.shape.n_tokens, 1)) * 8);
  prepared->op_start = std::make_unique<Event>();
  prepared->op_end = std::make_unique<Event>();
  stream_->synchronize();
  return prepared;
}

void HipBackend::run_op(HipPlan& plan, const PlanOp& op) {
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp>) {
          launch_embed(ctx_, weight(o.table).view, plan.i32(o.tokens), o.n_tokens, plan.f32(o.out));
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          launch_rmsnorm(ctx_, plan.f32(o.in) + o.in_row_offset * o.width, vector_weight(o.weight), plan.f32(o.out),
                         o.rows, o.width, o.eps);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          const DeviceWeight& w = weight(o.weight).view;
          if (!use_gemm(w.type, o.n_tokens))
            launch_matvec(ctx_, w, plan.f32(o.in), plan.f32(o.out), o.n_tokens);
          else
            launch_gemm(ctx_, w, plan.f32(o.in), plan.f32(o.out), o.n_tokens, plan.gemm_a_half->data(),
                        reinterpret_cast<float*>(plan.gemm_inv_scale->data()));
        } else if constexpr (std::is_same_v<T, AddBiasOp>) {
          launch_add_bias(ctx_, plan.f32(o.x), vector_weight(o.bias), o.rows, o.width);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          launch_rope(ctx_, plan.f32(o.x), plan.i32(o.positions), o.n_tokens, o.n_heads, o.head_dim, o.rope_dims,
                      o.pairing, o.base, o.freq_scale,
                      o.freq_factors == kNoWeight ? nullptr : vector_weight(o.freq_factors));
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          launch_kv_write(ctx_, plan.f32(o.src), plan.f32(o.cache), plan.i32(o.positions), o.n_tokens, o.width, o.ctx);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          const AttentionArgs a = attention_args(plan, o);
          if (use_flash_attention(a))
            launch_attention_prefill(ctx_, a);
          else
            launch_attention_decode(ctx_, a, reinterpret_cast<float*>(plan.attention_partials->data()));
        } else if constexpr (std::is_same_v<T, SwiGluOp>) {
          launch_swiglu(ctx_, plan.f32(o.gate), plan.f32(o.up), plan.f32(o.out), o.elems);
        } else {
          static_assert(std::is_same_v<T, AddOp>);
          launch_add(ctx_, plan.f32(o.x), plan.f32(o.y), o.elems);
        }
      },
      op.op);
}

void HipBackend::execute(PreparedPlan& prepared, const StepInput& step, OpRange range) {
  auto& plan = dynamic_cast<HipPlan&>(prepared);
  const Plan& p = plan.plan();
  const int64_t n = p.shape.n_tokens;
  GRETA_CHECK(int64_t(step.tokens.size()) == n, "step has ", step.tokens.size(), " tokens, plan ", n);
  GRETA_CHECK(step.start_pos >= 0 && step.start_pos + n <= p.shape.ctx, "start ", step.start_pos);
  GRETA_CHECK(range.begin <= range.end && range.end <= p.ops.size());

  // Step input through pinned memory (the previous step finished: execute ends with a synchronize).
  auto* in = reinterpret_cast<int32_t*>(plan.step_input->data());
  for (int64_t t = 0; t < n; ++t) {
    in[t] = step.tokens[size_t(t)];
    in[n + t] = int32_t(step.start_pos + t);
  }
  GRETA_GPU_CHECK(gpuMemcpyAsync(plan.i32(p.tokens), in, size_t(n) * 4, gpuMemcpyHostToDevice, stream_->get()),
                  "uploading tokens");
  GRETA_GPU_CHECK(gpuMemcpyAsync(plan.i32(p.positions), in + n, size_t(n) * 4, gpuMemcpyHostToDevice, stream_->get()),
                  "uploading positions");

  const bool whole = range.begin == 0 && range.end == p.ops.size();
  if (profiling_) {
    for (size_t i = range.begin; i < range.end; ++i) {
      plan.op_start->record(*stream_);
      run_op(plan, p.ops[i]);
      plan.op_end->record(*stream_);
      plan.op_end->synchronize();
      const double seconds = plan.op_end->seconds_since(*plan.op_start);
      plan.mutable_op_seconds()[i] += seconds;
      // Each op is synchronized, so it ended just before now on the host clock (for the engine's trace).
      const int64_t end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count();
      plan.op_spans().push_back({i, end_ns - int64_t(seconds * 1e9), end_ns});
    }
  } else if (whole && options_.use_graphs && !plan.graph_failed) {
    if (!plan.graph.ready()) {
      // Capture once; a runtime that cannot capture some launch falls back to direct launches for this plan.
      try {
        plan.graph.begin_capture(*stream_);
        try {
          for (size_t i = range.begin; i < range.end; ++i) run_op(plan, p.ops[i]);
        } catch (...) {
          gpuGraph_t partial{};
          (void)gpuStreamEndCapture(stream_->get(), &partial);
          if (partial) (void)gpuGraphDestroy(partial);
          throw;
        }
        plan.graph.end_capture(*stream_);
      } catch (const Error&) {
        plan.graph.reset();
        plan.graph_failed = true;
        (void)gpuGetLastError();  // clear the sticky launch error of the failed capture
      }
    }
    if (plan.graph.ready())
      plan.graph.launch(*stream_);
    else
      for (size_t i = range.begin; i < range.end; ++i) run_op(plan, p.ops[i]);
  } else {
    for (size_t i = range.begin; i < range.end; ++i) run_op(plan, p.ops[i]);
  }
  stream_->synchronize();
}

void HipBackend::read(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<float> dst) {
  auto& plan = dynamic_cast<HipPlan&>(prepared);
  const Plan& p = plan.plan();
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < p.buffers.size() && p.buffers[size_t(buffer)].type == ElemType::F32);
  GRETA_CHECK(offset >= 0 && offset + int64_t(dst.size()) <= p.buffers[size_t(buffer)].elems);
  if (dst.empty()) return;
  GRETA_GPU_CHECK(gpuMemcpyAsync(dst.data(), plan.f32(buffer) + offset, dst.size_bytes(), gpuMemcpyDeviceToHost,
                                 stream_->get()),
                  "reading a buffer");
  stream_->synchronize();
}

void HipBackend::write(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<const float> src) {
  auto& plan = dynamic_cast<HipPlan&>(prepared);
  const Plan& p = plan.plan();
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < p.buffers.size() && p.buffers[size_t(buffer)].type == ElemType::F32);
  GRETA_CHECK(offset >= 0 && offset + int64_t(src.size()) <= p.buffers[size_t(buffer)].elems);
  if (src.empty()) return;
  GRETA_GPU_CHECK(gpuMemcpyAsync(plan.f32(buffer) + offset, src.data(), src.size_bytes(), gpuMemcpyHostToDevice,
                                 stream_->get()),
                  "writing a buffer");
  stream_->synchronize();
}

}  // namespace greta::hip
