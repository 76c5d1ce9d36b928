// The HIP backend (see hip_backend.h).
#include "hip/hip_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/elem_convert.h"
#include "engine/kv_q8.h"
#include "model/quants.h"

namespace greta::hip {

using namespace greta::engine;

namespace {
constexpr size_t kStagingBytes = size_t(32) << 20;
constexpr int64_t kPrefillAttentionMinTokens = 16;

}  // namespace

// A plan's device buffers. Graph members come last: the graph references the buffers' addresses.
//
// Step inputs: every buffer whose role is a step input (I32) lives in one device allocation, `step_device`, at
// `StepSlot::offset` (256-byte aligned, back to back in plan order); `step_input` is pinned host memory of the same
// layout. execute() fills the pinned copy from the StepInput spans and uploads it with one copy; the device
// addresses never change, so a captured graph keeps reading the current step's values.
class HipPlan : public PreparedPlan {
public:
  using PreparedPlan::PreparedPlan;
  struct StepSlot {
    BufferId id;
    BufferRole role;
    size_t offset;
    int64_t elems;
  };
  std::vector<std::shared_ptr<PoolBuffer>> owned;  // by BufferId: scratch and persistent memory (null: step inputs)
  std::vector<uint8_t*> address;                   // by BufferId: the device address every kernel gets
  std::unique_ptr<PoolBuffer> step_device;
  std::unique_ptr<PinnedMemory> step_input;
  std::vector<StepSlot> step_slots;
  size_t step_bytes = 0;
  // The persistent buffers this plan uses, by name: a later plan that enlarged one made this plan stale.
  std::vector<std::pair<std::string, const PoolBuffer*>> persistent;
  std::unique_ptr<PoolBuffer> gemm_a_half, gemm_inv_scale, attention_partials, moe_scratch;
  bool f16_attention = true;  // false when the backend holds an F32 weight matrix (see hip_backend.h)
  std::unique_ptr<Event> op_start, op_end;  // profiling: around each op; step timing: around the whole execute
  Graph graph;
  bool graph_failed = false;

  float* f32(BufferId id) const { return reinterpret_cast<float*>(address[size_t(id)]); }
  int32_t* i32(BufferId id) const { return reinterpret_cast<int32_t*>(address[size_t(id)]); }
  void* raw(BufferId id) const { return address[size_t(id)]; }
  ElemType type(BufferId id) const { return plan().buffers[size_t(id)].type; }
  // A KV cache's element type as the kernels take it (check_op_fits admitted only these three).
  KvType kv_type(BufferId id) const {
    const ElemType t = type(id);
    return t == ElemType::F16 ? KvType::F16 : (t == ElemType::Q8_0 ? KvType::Q8_0 : KvType::F32);
  }
};

HipBackend::HipBackend(const HipBackendOptions& options) : options_(options) {
  int count = 0;
  GRETA_GPU_CHECK(gpuGetDeviceCount(&count), "counting devices");
  if (options.device < 0 || options.device >= count)
    fail("hip: no device ", options.device, " (", count, count == 1 ? " device)" : " devices)");
  GRETA_GPU_CHECK(gpuSetDevice(options.device), "selecting the device");
  props_ = query_device(options.device);
  stream_ = std::make_unique<Stream>();
  pool_ = std::make_unique<MemoryPool>();
  pool_->set_limit(options.device_memory_limit, props_.name);
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
  (void)gpuSetDevice(options_.device);  // the members below free this device's memory, stream and events
  if (stream_) (void)gpuStreamSynchronize(stream_->get());
}

void HipBackend::use_device() const { GRETA_GPU_CHECK(gpuSetDevice(options_.device), "selecting the device"); }

std::string HipBackend::name() const {
  return cat("hip: ", props_.name, " (", props_.arch, ", ", props_.compute_units, " CUs, wave", props_.wave_size,
             props_.mma ? ", matrix cores)" : ")");
}

uint64_t HipBackend::memory_capacity() const {
  use_device();
  size_t free_b = 0, total = 0;
  const uint64_t limit = options_.device_memory_limit;
  if (gpuMemGetInfo(&free_b, &total) != gpuSuccess) return limit > 0 ? std::min(limit, props_.memory_bytes) : props_.memory_bytes;
  // What the engine may still place: free memory plus what this backend already holds (its weights and caches are
  // part of the budget the engine computes), keeping 5% for the runtime.
  const auto device = uint64_t(double(free_b + pool_->reserved_bytes()) * 0.95);
  return limit > 0 ? std::min(limit, device) : device;
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
  use_device();
  GRETA_CHECK(weights_.empty(), "load_weights called twice");
  weights_.resize(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightDesc& d = weights[i];
    GRETA_CHECK(d.rows > 0 && d.cols > 0 && d.data, d.name);
    const WType type = static_cast<WType>(d.type);
    if (!is_supported(type)) fail("hip: weight ", d.name, " has type ", model::type_name(d.type), ", which the HIP kernels do not decode");
    const uint64_t rb = row_bytes(type, d.cols);
    GRETA_CHECK(rb == model::row_bytes(d.type, uint64_t(d.cols)) && rb * uint64_t(d.rows) == d.bytes, d.name);
    Weight& w = weights_[i];
    w.f32_matrix = d.rows > 1 && type == WType::F32;  // an F32 model keeps f32 attention (prepare)
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

bool HipBackend::use_flash_attention(const HipPlan& plan, const AttentionArgs& a) const {
  return plan.f16_attention && a.n_tokens >= kPrefillAttentionMinTokens && !a.one_query_per_seq &&
         attention_prefill_supported(ctx_, a);
}

const float* HipBackend::vector_weight(WeightId id) const {
  const Weight& w = weight(id);
  GRETA_CHECK(w.vector, "weight ", id, " is not a vector");
  return reinterpret_cast<const float*>(w.vector->data());
}

const float* HipBackend::float_weight(WeightId id, int64_t elems) const {
  const Weight& w = weight(id);
  if (w.vector && w.view.cols >= elems) return reinterpret_cast<const float*>(w.vector->data());
  GRETA_CHECK(w.view.type == WType::F32 && w.view.rows * w.view.cols >= elems, "weight ", id, " is not ", elems,
              " f32 values");
  return reinterpret_cast<const float*>(w.view.data);
}

namespace {

// Every buffer an op touches must hold what the op reads or writes: a bad plan is an internal error, never an
// out-of-bounds access on the device.
void check_op_fits(const Plan& p, const PlanOp& op) {
  auto decl = [&](BufferId id) -> const BufferDecl& {
    GRETA_CHECK(id >= 0 && size_t(id) < p.buffers.size(), op.label, ": buffer ", id);
    return p.buffers[size_t(id)];
  };
  auto need_elems = [&](const BufferDecl& b, int64_t elems) {
    GRETA_CHECK(b.elems >= elems, op.label, ": buffer ", b.name, " has ", b.elems, " elements, needs ", elems);
  };
  auto need = [&](BufferId id, int64_t elems, ElemType type) {
    const BufferDecl& b = decl(id);
    GRETA_CHECK(b.type == type, op.label, ": buffer ", b.name, " is ", elem_type_name(b.type), ", the HIP kernels need ",
                elem_type_name(type));
    need_elems(b, elems);
  };
  // KV caches: f32, f16 or q8_0 (the kernels are instantiated for all three) of `rows` rows of `width`; a q8_0 row
  // is whole blocks of 32 (kv_cache.h: the kernels find element e in block e / 32).
  auto need_cache = [&](BufferId id, int64_t rows, int64_t width) {
    const BufferDecl& b = decl(id);
    GRETA_CHECK(b.type == ElemType::F32 || b.type == ElemType::F16 || b.type == ElemType::Q8_0, op.label, ": cache ",
                b.name, " is ", elem_type_name(b.type));
    GRETA_CHECK(b.type != ElemType::Q8_0 || (width % kKvQ8Block == 0 && b.elems % kKvQ8Block == 0), op.label,
                ": q8_0 cache ", b.name, " with rows of ", width, " elements (not whole blocks of 32)");
    need_elems(b, rows * width);
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
          need_cache(o.cache, o.cache_rows, o.width);
          need(o.rows, o.n_tokens, ElemType::I32);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          GRETA_CHECK(o.n_kv_heads > 0 && o.n_heads % o.n_kv_heads == 0, op.label);
          GRETA_CHECK(o.n_seqs > 0 && o.page_size > 0 && o.pages_per_seq > 0 && o.cache_rows > 0, op.label);
          need(o.q, o.n_tokens * o.n_heads * o.head_dim, ElemType::F32);
          need_cache(o.k_cache, o.cache_rows, o.n_kv_heads * o.head_dim);
          need_cache(o.v_cache, o.cache_rows, o.n_kv_heads * o.head_dim_v);
          GRETA_CHECK(decl(o.k_cache).type == decl(o.v_cache).type, op.label, ": K and V caches of different types");
          need(o.positions, o.n_tokens, ElemType::I32);
          need(o.seq, o.n_tokens, ElemType::I32);
          need(o.page_table, o.n_seqs * o.pages_per_seq, ElemType::I32);
          need(o.out, o.n_tokens * o.n_heads * o.head_dim_v, ElemType::F32);
          GRETA_CHECK(o.window >= 0, op.label, ": window ", o.window);
        } else if constexpr (std::is_same_v<T, GatherRowsOp>) {
          GRETA_CHECK(o.in != o.out && o.width > 0, op.label, ": gather in place");
          need(o.in, o.width, ElemType::F32);
          need(o.rows, o.n_rows, ElemType::I32);
          need(o.out, o.n_rows * o.width, ElemType::F32);
        } else if constexpr (std::is_same_v<T, GluOp>) {
          need(o.gate, o.elems, ElemType::F32);
          need(o.up, o.elems, ElemType::F32);
          need(o.out, o.elems, ElemType::F32);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          need(o.x, o.elems, ElemType::F32);
          need(o.y, o.elems, ElemType::F32);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          GRETA_CHECK(o.k >= 1 && o.k <= o.n_experts && o.n_experts <= kMoeMaxExperts, op.label, ": ", o.k, " of ",
                      o.n_experts, " experts");
          need(o.logits, o.n_tokens * o.n_experts, ElemType::F32);
          need(o.experts, o.n_tokens * o.k, ElemType::I32);
          need(o.weights, o.n_tokens * o.k, ElemType::F32);
        } else if constexpr (std::is_same_v<T, MoeMatMulOp>) {
          GRETA_CHECK(o.k >= 1 && o.n_experts >= 1 && o.n_experts <= kMoeMaxExperts && o.in != o.out, op.label);
          need(o.in, o.n_tokens * (o.per_slot_input ? o.k : 1) * o.in_features, ElemType::F32);
          need(o.experts, o.n_tokens * o.k, ElemType::I32);
          need(o.out, o.n_tokens * o.k * o.out_features, ElemType::F32);
        } else if constexpr (std::is_same_v<T, MoeCombineOp>) {
          GRETA_CHECK(o.in != o.out, op.label, ": combine in place");
          need(o.in, o.n_tokens * o.k * o.width, ElemType::F32);
          need(o.weights, o.n_tokens * o.k, ElemType::F32);
          need(o.out, o.n_tokens * o.width, ElemType::F32);
        } else {
          static_assert(std::is_void_v<T>, "an op without a size check");
        }
      },
      op.op);
}

AttentionArgs attention_args(const HipPlan& plan, const AttentionOp& o) {
  AttentionArgs a{};
  a.q = plan.f32(o.q);
  a.k_cache = plan.raw(o.k_cache);
  a.v_cache = plan.raw(o.v_cache);
  a.positions = plan.i32(o.positions);
  a.seq = plan.i32(o.seq);
  a.page_table = plan.i32(o.page_table);
  a.out = plan.f32(o.out);
  a.n_tokens = o.n_tokens;
  a.one_query_per_seq = o.one_query_per_seq;
  a.n_heads = o.n_heads;
  a.n_kv_heads = o.n_kv_heads;
  a.head_dim = o.head_dim;
  a.head_dim_v = o.head_dim_v;
  a.n_seqs = o.n_seqs;
  a.page_size = o.page_size;
  a.pages_per_seq = o.pages_per_seq;
  a.cache_rows = o.cache_rows;
  a.scale = o.scale;
  a.cache = plan.kv_type(o.k_cache);
  a.window = o.window;
  return a;
}

// Device bytes of a buffer (at least 4, so that every buffer has an address).
size_t buffer_bytes(const BufferDecl& b) { return size_t(std::max<uint64_t>(elem_bytes(b.type, b.elems), 4)); }

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

std::unique_ptr<PreparedPlan> HipBackend::prepare(const Plan& plan) {
  use_device();
  // The features of newer architectures this backend's kernels implement (engine::OpFeature): all of them.
  require_features(plan, kAllOpFeatures, "hip");
  // Device bytes this plan adds: scratch, step inputs, new persistent buffers and enlarged ones (the old copy lives on
  // until the plans that hold it are dropped).
  uint64_t bytes = 0;
  for (const auto& b : plan.buffers) {
    GRETA_CHECK(b.elems >= 0, b.name);
    const auto it = persistent_.find(b.name);
    if (b.role != BufferRole::Persistent || it == persistent_.end() || b.elems > it->second.elems)
      bytes += buffer_bytes(b) + MemoryPool::kAlign;
  }
  if (bytes > memory_capacity())
    fail("hip: the plan needs ", format_bytes(double(bytes)), " of buffers, the device has ",
         format_bytes(double(memory_capacity())), " left");

  auto prepared = std::make_unique<HipPlan>(plan);
  prepared->owned.resize(plan.buffers.size());
  prepared->address.resize(plan.buffers.size(), nullptr);
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferDecl& b = plan.buffers[i];
    const size_t n = buffer_bytes(b);
    if (is_step_input(b.role)) {
      GRETA_CHECK(b.type == ElemType::I32, "step input ", b.name, " is not I32");
      prepared->step_slots.push_back({BufferId(i), b.role, prepared->step_bytes, b.elems});
      prepared->step_bytes = align_up(prepared->step_bytes + n, MemoryPool::kAlign);
    } else if (b.role == BufferRole::Persistent) {
      Persistent& shared = persistent_[b.name];
      GRETA_CHECK(!shared.memory || shared.type == b.type, "persistent buffer ", b.name, " changed type from ",
                  elem_type_name(shared.type), " to ", elem_type_name(b.type));
      if (!shared.memory) {
        shared = {std::make_shared<PoolBuffer>(*pool_, n), b.type, b.elems};
        GRETA_GPU_CHECK(gpuMemsetAsync(shared.memory->data(), 0, n, stream_->get()), "clearing the KV cache");
      } else if (b.elems > shared.elems) {
        // The engine grew its page pool: a larger buffer with the old contents at the start and zeros after them.
        // Plans prepared before keep the old buffer alive until the engine drops them (they must not run again).
        auto bigger = std::make_shared<PoolBuffer>(*pool_, n);
        const size_t old_bytes = size_t(elem_bytes(shared.type, shared.elems));
        if (old_bytes > 0)
          GRETA_GPU_CHECK(gpuMemcpyAsync(bigger->data(), shared.memory->data(), old_bytes, gpuMemcpyDeviceToDevice,
                                         stream_->get()),
                          "copying the KV cache into its enlarged buffer");
        GRETA_GPU_CHECK(gpuMemsetAsync(bigger->data() + old_bytes, 0, n - old_bytes, stream_->get()),
                        "clearing the enlarged KV cache");
        stream_->synchronize();  // the copy is done before the old range can return to the pool (growth is rare)
        shared = {std::move(bigger), b.type, b.elems};
      }
      prepared->owned[i] = shared.memory;
      prepared->address[i] = shared.memory->data();
      prepared->persistent.emplace_back(b.name, shared.memory.get());
    } else {
      prepared->owned[i] = std::make_shared<PoolBuffer>(*pool_, n);
      prepared->address[i] = prepared->owned[i]->data();
      GRETA_GPU_CHECK(gpuMemsetAsync(prepared->address[i], 0, n, stream_->get()), "clearing a buffer");
    }
  }
  // The step-input buffers: one device range, one pinned mirror (see HipPlan).
  const size_t step_alloc = std::max<size_t>(prepared->step_bytes, 4);
  prepared->step_device = std::make_unique<PoolBuffer>(*pool_, step_alloc);
  prepared->step_input = std::make_unique<PinnedMemory>(step_alloc);
  std::memset(prepared->step_input->data(), 0, step_alloc);
  GRETA_GPU_CHECK(gpuMemsetAsync(prepared->step_device->data(), 0, step_alloc, stream_->get()), "clearing step input");
  for (const auto& slot : prepared->step_slots)
    prepared->address[size_t(slot.id)] = prepared->step_device->data() + slot.offset;

  // Scratch sized by the largest op that needs it.
  int64_t a_half = 0, inv_scale = 0, partials = 0;
  uint64_t moe_scratch = 0;
  std::vector<bool> expert_bias(weights_.size(), false);
  for (const PlanOp& op : plan.ops) {
    check_op_fits(plan, op);
    if (const auto* m = std::get_if<MatMulOp>(&op.op)) {
      const Weight& w = weight(m->weight);
      GRETA_CHECK(w.view.cols == m->in_features && w.view.rows == m->out_features, op.label);
      a_half = std::max(a_half, m->n_tokens * m->in_features);
      inv_scale = std::max(inv_scale, m->n_tokens);
    } else if (const auto* a = std::get_if<AttentionOp>(&op.op)) {
      const AttentionArgs args = attention_args(*prepared, *a);
      partials = std::max(partials, attention_partials_elems(args, attention_splits(args.max_keys())));
      if (a->sinks != kNoWeight) float_weight(a->sinks, a->n_heads);
    } else if (const auto* m = std::get_if<MoeMatMulOp>(&op.op)) {
      const Weight& w = weight(m->weight);
      GRETA_CHECK(w.view.cols == m->in_features && w.view.rows == m->n_experts * m->out_features, op.label,
                  ": expert tensor of ", w.view.rows, "x", w.view.cols);
      if (m->bias != kNoWeight) {
        float_weight(m->bias, m->n_experts * m->out_features);
        expert_bias[size_t(m->bias)] = true;
      }
      if (use_gemm(w.view.type, m->n_tokens)) {
        MoeArgs args;
        args.w = w.view;
        args.n_tokens = m->n_tokens;
        args.k = m->k;
        args.out_features = m->out_features;
        args.n_experts = m->n_experts;
        args.per_slot_input = m->per_slot_input;
        moe_scratch = std::max(moe_scratch, moe_gemm_scratch_bytes(args));
      }
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
  if (moe_scratch > 0) prepared->moe_scratch = std::make_unique<PoolBuffer>(*pool_, size_t(moe_scratch));
  for (size_t i = 0; i < weights_.size(); ++i)
    if (weights_[i].f32_matrix && !expert_bias[i]) prepared->f16_attention = false;
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
          launch_embed(ctx_, weight(o.table).view, plan.i32(o.tokens), o.n_tokens, plan.f32(o.out), o.scale);
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
                      o.freq_factors == kNoWeight ? nullptr : vector_weight(o.freq_factors),
                      RopeScaling{o.ext_factor, o.attn_factor, o.yarn_low, o.yarn_high});
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          launch_kv_write(ctx_, plan.f32(o.src), plan.raw(o.cache), plan.kv_type(o.cache), plan.i32(o.rows), o.n_tokens,
                          o.width, o.cache_rows);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          AttentionArgs a = attention_args(plan, o);
          if (o.sinks != kNoWeight) a.sinks = float_weight(o.sinks, o.n_heads);
          if (use_flash_attention(plan, a))
            launch_attention_prefill(ctx_, a);
          else
            launch_attention_decode(ctx_, a, reinterpret_cast<float*>(plan.attention_partials->data()));
        } else if constexpr (std::is_same_v<T, GatherRowsOp>) {
          const int64_t in_rows = plan.plan().buffers[size_t(o.in)].elems / o.width;
          launch_gather_rows(ctx_, plan.f32(o.in), plan.i32(o.rows), plan.f32(o.out), o.n_rows, o.width, in_rows);
        } else if constexpr (std::is_same_v<T, GluOp>) {
          const GluAct act = o.kind == GluKind::GeluTanh    ? GluAct::GeluTanh
                             : o.kind == GluKind::SwiGluOai ? GluAct::SwiGluOai
                                                            : GluAct::SiLU;
          launch_glu(ctx_, act, plan.f32(o.gate), plan.f32(o.up), plan.f32(o.out), o.elems, o.alpha, o.limit);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          launch_add(ctx_, plan.f32(o.x), plan.f32(o.y), o.elems);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          launch_moe_route(ctx_, plan.f32(o.logits), plan.i32(o.experts), plan.f32(o.weights), o.n_tokens, o.n_experts,
                           o.k, o.gating == MoeGating::TopKSoftmax, o.normalize);
        } else if constexpr (std::is_same_v<T, MoeMatMulOp>) {
          MoeArgs a;
          a.w = weight(o.weight).view;
          a.bias = o.bias == kNoWeight ? nullptr : float_weight(o.bias, o.n_experts * o.out_features);
          a.in = plan.f32(o.in);
          a.experts = plan.i32(o.experts);
          a.out = plan.f32(o.out);
          a.n_tokens = o.n_tokens;
          a.k = o.k;
          a.out_features = o.out_features;
          a.n_experts = o.n_experts;
          a.per_slot_input = o.per_slot_input;
          if (use_gemm(a.w.type, o.n_tokens))
            launch_moe_gemm(ctx_, a, plan.moe_scratch->data());
          else
            launch_moe_matvec(ctx_, a);
        } else {
          static_assert(std::is_same_v<T, MoeCombineOp>);
          launch_moe_combine(ctx_, plan.f32(o.in), plan.f32(o.weights), plan.f32(o.out), o.n_tokens, o.k, o.width);
        }
      },
      op.op);
}

void HipBackend::execute(PreparedPlan& prepared, const StepInput& step, OpRange range) {
  use_device();
  auto& plan = dynamic_cast<HipPlan&>(prepared);
  const Plan& p = plan.plan();
  GRETA_CHECK(range.begin <= range.end && range.end <= p.ops.size());
  for (const auto& [name, memory] : plan.persistent) {
    const auto it = persistent_.find(name);
    GRETA_CHECK(it != persistent_.end() && it->second.memory.get() == memory, "hip: persistent buffer ", name,
                " was enlarged by a later plan; this plan was prepared before and must not run again");
  }

  // Step timing (Backend::set_step_timing): two events around the whole execute, its upload included.
  const bool timed = step_timing_ && !profiling_;
  if (timed) plan.op_start->record(*stream_);
  // Step input through the pinned mirror, one upload (the previous step finished: execute ends with a synchronize).
  uint8_t* staging = plan.step_input->data();
  for (const auto& slot : plan.step_slots) {
    const std::span<const int32_t> values = step.for_role(slot.role);
    GRETA_CHECK(int64_t(values.size()) == slot.elems, "step input ", p.buffers[size_t(slot.id)].name, " has ",
                values.size(), " values, the plan ", slot.elems);
    if (!values.empty()) std::memcpy(staging + slot.offset, values.data(), values.size_bytes());
  }
  if (plan.step_bytes > 0)
    GRETA_GPU_CHECK(gpuMemcpyAsync(plan.step_device->data(), staging, plan.step_bytes, gpuMemcpyHostToDevice,
                                   stream_->get()),
                    "uploading the step input");

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
  if (timed) plan.op_end->record(*stream_);
  stream_->synchronize();
  if (timed) plan.set_run_device_seconds(plan.op_end->seconds_since(*plan.op_start));
}

namespace {
// A buffer's element range [offset, offset + count), checked; Q8_0 ranges are whole blocks of 32.
void check_float_range(const Plan& p, BufferId buffer, int64_t offset, size_t count) {
  GRETA_CHECK(buffer >= 0 && size_t(buffer) < p.buffers.size(), "buffer ", buffer);
  const BufferDecl& b = p.buffers[size_t(buffer)];
  GRETA_CHECK(offset >= 0 && offset + int64_t(count) <= b.elems, "buffer ", b.name, ": range ", offset, "+", count,
              " of ", b.elems);
  GRETA_CHECK(b.type != ElemType::Q8_0 || (offset % kKvQ8Block == 0 && int64_t(count) % kKvQ8Block == 0), "buffer ",
              b.name, ": q8_0 range ", offset, "+", count, " is not whole blocks of 32");
}
}  // namespace

// F16 and Q8_0 buffers are converted on the host: f16 bits, or the range's q8_0 blocks (engine/kv_q8.h); I32 buffers
// (MoE expert ids, step inputs) as floats, exact below 2^24.
void HipBackend::read(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<float> dst) {
  use_device();
  auto& plan = dynamic_cast<HipPlan&>(prepared);
  check_float_range(plan.plan(), buffer, offset, dst.size());
  if (dst.empty()) return;
  const ElemType type = plan.type(buffer);
  if (type == ElemType::I32) {
    std::vector<int32_t> ids(dst.size());
    GRETA_GPU_CHECK(gpuMemcpyAsync(ids.data(), plan.i32(buffer) + offset, ids.size() * sizeof(int32_t),
                                   gpuMemcpyDeviceToHost, stream_->get()),
                    "reading a buffer");
    stream_->synchronize();
    std::transform(ids.begin(), ids.end(), dst.begin(), [](int32_t v) { return float(v); });
    return;
  }
  if (type == ElemType::F16 || type == ElemType::Q8_0) {
    const int64_t n = int64_t(dst.size());
    std::vector<uint32_t> raw((elem_bytes(type, n) + 3) / 4);
    GRETA_GPU_CHECK(gpuMemcpyAsync(raw.data(), plan.address[size_t(buffer)] + elem_bytes(type, offset),
                                   elem_bytes(type, n), gpuMemcpyDeviceToHost, stream_->get()),
                    "reading a buffer");
    stream_->synchronize();
    floats_from_elems(type, raw.data(), dst);
    return;
  }
  GRETA_GPU_CHECK(gpuMemcpyAsync(dst.data(), plan.f32(buffer) + offset, dst.size_bytes(), gpuMemcpyDeviceToHost,
                                 stream_->get()),
                  "reading a buffer");
  stream_->synchronize();
}

void HipBackend::write(PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<const float> src) {
  use_device();
  auto& plan = dynamic_cast<HipPlan&>(prepared);
  check_float_range(plan.plan(), buffer, offset, src.size());
  if (src.empty()) return;
  const ElemType type = plan.type(buffer);
  if (type == ElemType::I32) {  // ids written back as floats (verify mode's resync of MoE expert ids)
    std::vector<int32_t> ids(src.size());
    std::transform(src.begin(), src.end(), ids.begin(), [](float v) { return int32_t(std::lround(v)); });
    GRETA_GPU_CHECK(gpuMemcpyAsync(plan.i32(buffer) + offset, ids.data(), ids.size() * sizeof(int32_t),
                                   gpuMemcpyHostToDevice, stream_->get()),
                    "writing a buffer");
    stream_->synchronize();
    return;
  }
  if (type == ElemType::F16 || type == ElemType::Q8_0) {
    const int64_t n = int64_t(src.size());
    std::vector<uint32_t> raw((elem_bytes(type, n) + 3) / 4);
    elems_from_floats(type, src, raw.data());
    GRETA_GPU_CHECK(gpuMemcpyAsync(plan.address[size_t(buffer)] + elem_bytes(type, offset), raw.data(),
                                   elem_bytes(type, n), gpuMemcpyHostToDevice, stream_->get()),
                    "writing a buffer");
    stream_->synchronize();  // before `raw` goes
    return;
  }
  GRETA_GPU_CHECK(gpuMemcpyAsync(plan.f32(buffer) + offset, src.data(), src.size_bytes(), gpuMemcpyHostToDevice,
                                 stream_->get()),
                  "writing a buffer");
  stream_->synchronize();
}

}  // namespace greta::hip
