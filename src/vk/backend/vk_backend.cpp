#include "vk/backend/vk_backend.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/error.h"
#include "engine/elem_convert.h"
#include "engine/kv_q8.h"
#include "model/quants.h"
#include "vk/backend/encoder.h"
#include "vk/backend/fusion.h"
#include "vk/instance.h"

namespace greta::vk {

struct SharedVkDevice {
  std::unique_ptr<Context> context;
  std::unique_ptr<Pipelines> pipelines;  // destroyed before the context
};

std::shared_ptr<SharedVkDevice> open_shared_vk_device(int device, bool validation, const std::string& cache_dir,
                                                      std::optional<uint64_t> spin_wait_us) {
  ContextOptions co;
  co.instance.validation = validation;
  co.cache_dir = cache_dir;
  co.spin_wait_us = spin_wait_us;
  auto shared = std::make_shared<SharedVkDevice>();
  shared->context = Context::create(device, co);
  shared->pipelines = std::make_unique<Pipelines>(*shared->context);
  return shared;
}

namespace {

using engine::BufferId;
using engine::BufferRole;

// Device bytes of a plan buffer: its elements at their size (F16: 2 bytes), rounded up to whole 32-bit words (the
// kernels' and vkCmdFillBuffer's unit), at least one word.
uint64_t buffer_bytes(engine::ElemType type, int64_t elems) {
  return std::max<uint64_t>((engine::elem_bytes(type, elems) + 3) / 4 * 4, 4);
}

// A plan on the device. Member order matters: the recorded sequences are destroyed (and waited for) first, then
// the buffers they use.
class VkPlan : public engine::PreparedPlan {
public:
  using engine::PreparedPlan::PreparedPlan;

  std::vector<Buffer> owned;                         // scratch, step-input and logits buffers
  std::vector<std::shared_ptr<Buffer>> persistent;   // the KV cache (shared with other plans of the model)
  std::vector<BufferSpan> spans;                     // by BufferId
  // The step inputs (engine::is_step_input roles): written from the StepInput into the mapped `upload` buffer before
  // each step, then copied by the recording's first commands into `device`, which the kernels read. Read straight
  // from host memory, each dependent read of a position or a page (rope, KV writes, attention, every layer) waited
  // a bus round trip on a discrete GPU; on unified memory the copy costs a few hundred bytes and a barrier a step.
  struct StepInputBuffers {
    BufferId id;
    Buffer* upload;
    BufferSpan device;
  };
  std::vector<StepInputBuffers> step_inputs;
  std::optional<Buffer> step_args_upload, step_args_device;  // StepArgs (decode attention's indirect dispatches)
  std::deque<Buffer> constants;                      // made while encoding (rope frequencies, scratch)
  std::vector<StepSplitGroups> step_groups;          // indirect dispatch sizes written before each step
  std::vector<std::string> variants;                 // by op index: the kernels the op uses
  MatmulTuning tuning;                               // the prefill matmul tiles as they were at prepare
  // The logits are copied into this mapped buffer at the end of every recording that runs the plan's last op, so
  // reading them after a step needs no second submission; fresh while the last step ran the whole plan.
  std::optional<Buffer> logits_readback;
  bool logits_fresh = false;
  std::map<std::tuple<size_t, size_t, bool>, std::unique_ptr<RecordedSequence>> sequences;  // (begin, end, profile)
};

// GRETA_VK_SPIN_US (experiment_switches.h): microseconds a wait polls before it blocks (0: never polls).
std::optional<uint64_t> spin_from_switches(const ExperimentSwitches& switches) {
  const char* v = switches.get("GRETA_VK_SPIN_US");
  if (!v) return std::nullopt;
  char* end = nullptr;
  const unsigned long long us = std::strtoull(v, &end, 10);
  if (*end != '\0' || us > 10000000ull) fail("GRETA_VK_SPIN_US=", v, ": expected 0 .. 10000000 microseconds");
  return uint64_t(us);
}

// GRETA_VK_MATMUL (experiment_switches.h) where the options leave the kernel automatic.
MatmulKernel matmul_from_switches(MatmulKernel chosen, const ExperimentSwitches& switches) {
  const char* v = switches.get("GRETA_VK_MATMUL");
  if (!v || chosen != MatmulKernel::automatic) return chosen;
  const std::string_view s(v);
  if (s == "tiled") return MatmulKernel::tiled;
  if (s == "coopmat") return MatmulKernel::coopmat;
  if (s == "matvec") return MatmulKernel::matvec;
  if (s == "auto") return MatmulKernel::automatic;
  fail("GRETA_VK_MATMUL=", s, ": expected auto, tiled, coopmat or matvec");
}

class VkBackend : public engine::Backend {
public:
  explicit VkBackend(const VkBackendOptions& options) : options_(options) {
    device_ = options.shared_device ? options.shared_device
                                    : open_shared_vk_device(options.device, options.validation, options.cache_dir,
                                                            spin_from_switches(options.switches));
    context_ = device_->context.get();
    pipelines_ = device_->pipelines.get();
    allocator_ = std::make_unique<Allocator>(*context_);
    allocator_->set_device_limit(options.device_memory_limit);
    transfer_ = std::make_unique<Transfer>(*context_, *allocator_);
    options_.matmul = matmul_from_switches(options.matmul, options.switches);
    if (const char* v = options.switches.get("GRETA_VK_MATVEC_Q8")) {
      const std::string s = v;
      if (s != "0" && s != "1") fail("GRETA_VK_MATVEC_Q8=", s, ": expected 0 or 1");
      options_.q8_activations = s == "1";
    }
    // H100, 7B Q4_0 tg128: int8 activations 281 tok/s without the swiglu fusion, 288 with it; f32 239 / 229.
    const unsigned default_fusions =
        int8_activations() ? kFuseAll : kFuseResidual | kFuseNorm | kFuseRopeKv | kFuseBias | kFuseRoute;
    options_.fusions = fusions_from_switches(options.fusions.value_or(default_fusions), options.switches);
    const DeviceInfo& info = context_->info();
    device_key_ = make_device_key(info.vendor_id, info.device_id, info.driver_version, info.pipeline_cache_uuid,
                                  info.name);
    tuning_path_ = TuningCache::path_in(options.cache_dir.empty() ? default_cache_dir() : options.cache_dir);
    if (options.tuning_cache) load_tuning();
    constexpr VkSubgroupFeatureFlags kMatvecSubgroupOps =
        VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    if (!info.subgroup_ops_in_compute || (info.subgroup_operations & kMatvecSubgroupOps) != kMatvecSubgroupOps)
      fail("vk: ", info.name,
           " has no subgroup arithmetic and shuffles in compute shaders, which the matvec kernels need");
  }

  ~VkBackend() override {
    if (context_) context_->queue().wait_all();
  }

  std::string name() const override { return cat("vulkan: ", context_->info().name); }
  const Context& context() const { return *context_; }
  bool int8_activations() const {
    const bool wanted = options_.q8_activations.value_or(context_->info().integer_dot_product_accelerated);
    return wanted && context_->features().integer_dot_product &&
           shader_available(ShaderId::matvec_q8_q4_0);  // built when glslang has GL_EXT_integer_dot_product
  }
  bool cooperative_matrix() const {
    const DeviceInfo& info = context_->info();
    return context_->features().cooperative_matrix && shader_available(ShaderId::matmul_coopmat_f16) &&
           info.subgroup_ops_in_compute &&
           info.supports_coopmat(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR);
  }

  const DeviceKey& device_key() const { return device_key_; }
  bool cpu_device() const { return context_->info().type == VK_PHYSICAL_DEVICE_TYPE_CPU; }
  const std::string& tuning_path() const { return tuning_path_; }
  void set_matmul_config(std::optional<MatmulConfig> config) { forced_matmul_ = config; }
  bool matmul_config_valid(const MatmulConfig& c) const {
    const DeviceInfo& info = context_->info();
    if (c.kernel == GemmKernel::coopmat && !coopmat_matmul_usable(info, context_->features(), model::GgmlType::F16))
      return false;
    return matmul_tile_valid(c.kernel, c.tile, info);
  }
  GemmKernel automatic_gemm_kernel(model::GgmlType type) const {
    return type != model::GgmlType::F32 && coopmat_matmul_usable(context_->info(), context_->features(), type)
               ? GemmKernel::coopmat
               : GemmKernel::tiled;
  }

  std::string weights_note() const override {
    if (in_place_bytes_ == 0) return "";
    return cat("weights: ", format_bytes(double(in_place_bytes_)), " used in place from the mapped file (imported host memory)",
               copied_bytes_ ? cat(", ", format_bytes(double(copied_bytes_)), " copied (not importable)") : "");
  }

  uint64_t memory_capacity() const override {
    const uint64_t device = context_->info().memory_capacity();
    return options_.device_memory_limit > 0 ? std::min(device, options_.device_memory_limit) : device;
  }

  void load_weights(std::span<const engine::WeightDesc> weights) override {
    GRETA_CHECK(weights_.empty(), "load_weights called twice");
    uint64_t total = 0;
    for (const auto& d : weights) total += d.bytes;
    if (total > memory_capacity())
      fail("vk: the model's weights need ", format_bytes(double(total)), " but ", context_->info().name, " has ",
           format_bytes(double(memory_capacity())), " of device memory (--gpu-layers puts part of the model on the CPU)");
    weights_.resize(weights.size());
    const bool unified = context_->info().unified_memory();
    const bool import = context_->features().external_memory_host && options_.import_host_weights;
    uint64_t matrix_bytes = 0, f32_matrix_bytes = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const engine::WeightDesc& d = weights[i];
      DeviceWeight& w = weights_[i];
      GRETA_CHECK(d.rows > 0 && d.cols > 0 && d.data, d.name);
      w.name = d.name;
      w.type = d.type;
      w.rows = d.rows;
      w.cols = d.cols;
      w.row_bytes = model::row_bytes(d.type, uint64_t(d.cols));
      GRETA_CHECK(w.row_bytes * uint64_t(d.rows) == d.bytes, d.name);
      if (d.rows > 1) {
        matrix_bytes += d.bytes;
        if (d.type == model::GgmlType::F32) f32_matrix_bytes += d.bytes;
      }
      if (d.rows == 1) {  // norms, biases, rope factors: f32 on the device
        w.host_values.resize(size_t(d.cols));
        model::dequantize_row(d.type, d.data, w.host_values.data(), d.cols);
        w.vector = allocator_->create_buffer(w.host_values.size() * sizeof(float), MemoryUse::device, d.name);
        transfer_->upload(w.vector, w.host_values);
      } else if (import && d.release &&
                 (w.matrix = allocator_->import_split_buffer(d.data, (d.bytes + 3) & ~uint64_t(3), w.row_bytes, d.name))
                     .size() > 0) {
        // The mapped file's pages are the device's memory: used in place, nothing copied, nothing to release. (The
        // padding to 4 bytes stays within the file's last page: only a size that is not a multiple of 4 is padded.)
        in_place_bytes_ += d.bytes;
        continue;
      } else if (unified) {
        if (import && d.release) copied_bytes_ += d.bytes;  // could not be imported
        // Unified memory: straight from the mapped file into device memory the host can write, no staging copy.
        w.matrix = allocator_->create_split_buffer((d.bytes + 3) & ~uint64_t(3), w.row_bytes, d.name,
                                                   MemoryUse::device_mapped);
        for (size_t c = 0; c < w.matrix.chunk_count(); ++c) {
          const Buffer& chunk = w.matrix.chunk(c);
          const uint64_t at = w.matrix.chunk_offset(c), n = std::min(chunk.size(), d.bytes - std::min(d.bytes, at));
          std::memcpy(chunk.mapped(), static_cast<const uint8_t*>(d.data) + at, n);
          chunk.flush(0, chunk.size());
        }
      } else {
        // Whole rows per chunk; the total is padded to 4 bytes so the kernels' 32-bit reads stay inside the buffer.
        w.matrix = allocator_->create_split_buffer((d.bytes + 3) & ~uint64_t(3), w.row_bytes, d.name);
        transfer_->upload(w.matrix, 0, d.data, d.bytes);
      }
      // The bytes are copied (upload() returns once they are in staging): the file's pages may go.
      if (d.release) d.release(d.data, d.bytes);
    }
    // An F32 model keeps f32 activations in attention. The measure is bytes: the F32 routers and expert biases of a
    // quantized mixture of experts are a few megabytes of a many-gigabyte model and must not turn it off.
    f16_attention_ = 2 * f32_matrix_bytes <= matrix_bytes;
    context_->queue().wait_all();
  }

  // The int8 input of the first expert matmul among the few records after i that takes op i's fused norm as its own
  // (the gate projection after the router and the route), unless something in between writes the norm's input.
  static std::optional<Q8Source> moe_q8_input_after(const std::vector<OpRecord>& records, engine::OpRange range,
                                                    size_t i, const std::vector<engine::PlanOp>& ops, OpEncoder& e) {
    const engine::RmsNormOp& norm = *records[i - range.begin].matmul.norm;
    const auto same = [&](const engine::RmsNormOp& n) {
      return n.in == norm.in && n.weight == norm.weight && n.rows == norm.rows && n.width == norm.width &&
             n.in_row_offset == norm.in_row_offset && n.eps == norm.eps;
    };
    for (size_t j = i + 1; j < std::min(range.end, i + 4); ++j) {
      const OpRecord& r = records[j - range.begin];
      if (r.kind == OpRecord::Kind::moe_matmul && r.moe && r.moe->norm && same(*r.moe->norm))
        return moe_q8_input(e, std::get<engine::MoeMatMulOp>(ops[j].op), &*r.moe);
      if (std::find(r.writes.begin(), r.writes.end(), norm.in) != r.writes.end()) break;
    }
    return std::nullopt;
  }

  // The int8 input of the first decode matvec among the few records after i that normalizes `x` itself (the next
  // layer's Q, K and V projections), unless a record in between (not absorbed) touches `x`.
  static std::optional<Q8Source> norm_q8_input_after(const std::vector<OpRecord>& records, engine::OpRange range,
                                                     size_t i, engine::BufferId x, OpEncoder& e) {
    for (size_t j = i + 1; j < std::min(range.end, i + 6); ++j) {
      const OpRecord& r = records[j - range.begin];
      if (r.kind == OpRecord::Kind::matmul && r.matmul.norm && r.matmul.norm->in == x)
        return matvec_q8_input(e, r.matmul);
      const auto has_x = [&](const std::vector<engine::BufferId>& v) { return std::find(v.begin(), v.end(), x) != v.end(); };
      if (r.kind != OpRecord::Kind::absorbed && (has_x(r.reads) || has_x(r.writes))) break;
    }
    return std::nullopt;
  }

  // The records of a decode step's Q, K and V projections (from record i, the first) and of the rope_kv after them,
  // where all three can do its work (rope_out_usable; matvec_block.comp's ROPE_OUT), so that its dispatch goes.
  struct RopeParts {
    size_t q = 0, k = 0, v = 0, rope_kv = 0;
    uint32_t part(size_t i) const { return i == q ? 1 : i == k ? 2 : i == v ? 3 : 0; }
  };
  static std::optional<RopeParts> rope_kv_parts(const std::vector<OpRecord>& records, engine::OpRange range, size_t i,
                                                OpEncoder& e) {
    for (size_t j = i + 1; j < std::min(range.end, i + 8); ++j) {
      const OpRecord& r = records[j - range.begin];
      if (r.kind != OpRecord::Kind::rope_kv) continue;
      const RopeKvArgs& a = *r.rope_kv;
      if (!a.v_write) return std::nullopt;
      const engine::BufferId outs[] = {a.q.x, a.k.x, a.v_write->src};
      RopeParts parts{.rope_kv = j};
      unsigned found = 0;
      for (size_t m = i; m < j; ++m) {
        const OpRecord& rm = records[m - range.begin];
        if (rm.kind == OpRecord::Kind::absorbed) continue;
        uint32_t part = 0;
        if (rm.kind == OpRecord::Kind::matmul)
          for (uint32_t p = 0; p < 3; ++p)
            if (rm.matmul.op.out == outs[p]) part = p + 1;
        if (part == 0) {  // anything else touching q, k or v in between keeps the rope_kv dispatch
          for (engine::BufferId b : outs)
            if (std::find(rm.reads.begin(), rm.reads.end(), b) != rm.reads.end() ||
                std::find(rm.writes.begin(), rm.writes.end(), b) != rm.writes.end())
              return std::nullopt;
          continue;
        }
        MatmulArgs args = rm.matmul;
        args.rope_out = RopeOut{a, part};
        if ((found & (1u << part)) || !rope_out_usable(e, args)) return std::nullopt;
        (part == 1 ? parts.q : part == 2 ? parts.k : parts.v) = m;
        found |= 1u << part;
      }
      if (found != 14u) return std::nullopt;
      return parts;
    }
    return std::nullopt;
  }

  // The copies of `product` (op i's output, `elems` values) that the GEMMs right after op i read whole, as tokens x
  // in_features: f16 for the cooperative-matrix GEMM, int8 for the int8 one. Then op i (an rmsnorm: Q, K and V after
  // attn_norm, gate and up after ffn_norm; a GLU: the down projection; batched decode attention: the output
  // projection) writes them itself, and the GEMMs' conversion or quantizer dispatch and its stage go (H200, 8B
  // batched decode: 4.0-4.5 us each, four per layer). A mixed file (Q4_K_M: Q and K in Q4_K, V in Q6_K) gets both.
  struct GemmCopies {
    std::optional<GemmRows> f16, q8;
  };
  static GemmCopies gemm_reads(const std::vector<OpRecord>& records, engine::OpRange range, size_t i,
                               engine::BufferId product, int64_t elems, const std::vector<engine::PlanOp>& ops,
                               const OpEncoder& e) {
    GemmCopies copies;
    for (size_t j = i + 1; j < std::min(range.end, i + 4); ++j) {
      if (!std::holds_alternative<engine::MatMulOp>(ops[j].op)) break;
      const OpRecord& r = records[j - range.begin];
      if (r.kind != OpRecord::Kind::op && r.kind != OpRecord::Kind::matmul) break;
      const MatmulArgs& a = r.matmul;
      if (a.norm || a.swiglu || a.bias || a.route || a.op.in != product || a.op.n_tokens * a.op.in_features != elems ||
          a.op.in_features % 4 != 0)
        break;
      const GemmRows rows{uint64_t(a.op.n_tokens), uint64_t(a.op.in_features)};
      if (matmul_takes_q8_input(e, a.op)) copies.q8 = rows;
      else if (matmul_takes_f16_input(e, a.op)) copies.f16 = rows;
    }
    return copies;
  }

  std::unique_ptr<engine::PreparedPlan> prepare(const engine::Plan& plan) override {
    // The features of newer architectures this backend's kernels implement (engine::OpFeature): all of them.
    engine::require_features(plan, engine::kAllOpFeatures, "vulkan");
    auto p = std::make_unique<VkPlan>(plan);
    p->spans.resize(plan.buffers.size());
    p->variants.resize(plan.ops.size());
    p->tuning = MatmulTuning{forced_matmul_, &tuned_};
    p->owned.reserve(2 * plan.buffers.size());  // a step input has two (mirror_step_inputs); pointers must not move
    const uint64_t max_range = context_->max_binding_range();
    // Persistent buffers made (all zeros) or grown (old contents, then zeros) by this plan: one recording does both.
    std::vector<BufferSpan> fresh_persistent;
    std::vector<std::pair<std::shared_ptr<Buffer>, BufferSpan>> grown;  // (old buffer, the new one's span)
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
      const engine::BufferDecl& b = plan.buffers[i];
      const uint64_t bytes = buffer_bytes(b.type, b.elems);
      if (bytes > max_range)
        fail("vk: buffer ", b.name, " needs ", format_bytes(double(bytes)), ", more than one binding of ",
             context_->info().name, " may cover (", format_bytes(double(max_range)), "); use a smaller --ctx or batch");
      if (b.role == BufferRole::Persistent) {
        Persistent& shared = persistent_[b.name];
        if (!shared.buffer) {
          shared = {std::make_shared<Buffer>(allocator_->create_buffer(bytes, MemoryUse::device, b.name)), b.type};
          fresh_persistent.push_back(shared.buffer->span());
        } else if (shared.type != b.type) {
          fail("vk: persistent buffer ", b.name, " changed type from ", engine::elem_type_name(shared.type), " to ",
               engine::elem_type_name(b.type));
        } else if (shared.buffer->size() < bytes) {
          // The engine grew its page pool: a larger buffer with the old contents in front. Plans prepared before
          // keep the old buffer alive until the engine drops them (they must not run again).
          auto larger = std::make_shared<Buffer>(allocator_->create_buffer(bytes, MemoryUse::device, b.name));
          grown.emplace_back(shared.buffer, larger->span());
          shared.buffer = std::move(larger);
        }
        // A plan that declares it smaller (never the engine's) sees the front of the larger buffer.
        p->persistent.push_back(shared.buffer);
        p->spans[i] = shared.buffer->span();
        continue;
      }
      const bool step_input = engine::is_step_input(b.role);
      p->owned.push_back(allocator_->create_buffer(bytes, step_input ? MemoryUse::upload : MemoryUse::device, b.name));
      p->spans[i] = p->owned.back().span();
      if (step_input) {
        GRETA_CHECK(b.type == engine::ElemType::I32, "step input ", b.name, " is not I32");
        Buffer* upload = &p->owned.back();
        p->owned.push_back(allocator_->create_buffer(bytes, MemoryUse::device, b.name + " (device copy)"));
        p->spans[i] = p->owned.back().span();
        p->step_inputs.push_back({BufferId(i), upload, p->spans[i]});
      }
    }
    constexpr uint64_t kStepArgBytes = uint64_t(StepArgs::kSlots) * StepArgs::kSlotBytes;
    p->step_args_upload.emplace(allocator_->create_buffer(kStepArgBytes, MemoryUse::upload, "attention split groups"));
    p->step_args_device.emplace(
        allocator_->create_buffer(kStepArgBytes, MemoryUse::device, "attention split groups (device copy)"));
    if (plan.logits != engine::kNoBuffer)
      p->logits_readback.emplace(allocator_->create_buffer(
          std::max<uint64_t>(uint64_t(plan.buffers[size_t(plan.logits)].elems) * 4, 4), MemoryUse::readback,
          "logits read-back"));
    if (!fresh_persistent.empty() || !grown.empty()) {  // a new KV cache starts as zeros, never as stale memory
      RecordedSequence init(*context_, "initialize persistent");
      init.record([&](Recorder& r) {
        for (const auto& s : fresh_persistent) r.fill(s, 0);
        for (const auto& [old, to] : grown) {
          const uint64_t kept = old->size();
          r.copy(old->span(), {to.buffer, to.offset, kept}, "keep persistent contents");
          r.fill({to.buffer, to.offset + kept, to.size - kept}, 0);
        }
      });
      init.run();
    }
    sequence(*p, {0, plan.ops.size()}, false);  // record the full step now: prepare() is where the cost belongs
    if (const char* log = std::getenv("GRETA_VK_LOG_KERNELS"); log && *log && std::string_view(log) != "0")
      std::fprintf(stderr, "greta: vk kernels for %lld-token steps on %s:\n%s", (long long)plan.shape.n_tokens,
                   context_->info().name.c_str(), describe_kernels(*p).c_str());
    return p;
  }

  void execute(engine::PreparedPlan& prepared, const engine::StepInput& step, engine::OpRange range) override {
    auto& p = dynamic_cast<VkPlan&>(prepared);
    const engine::Plan& plan = p.plan();
    for (const auto& [id, upload, device] : p.step_inputs) {
      const engine::BufferDecl& b = plan.buffers[size_t(id)];
      const std::span<const int32_t> values = step.for_role(b.role);
      GRETA_CHECK(int64_t(values.size()) == b.elems, "step input ", b.name, " has ", values.size(), " values, plan ",
                  b.elems);
    }
    GRETA_CHECK(range.begin <= range.end && range.end <= plan.ops.size());
    if (range.begin == range.end) return;

    RecordedSequence& seq = sequence(p, range, profiling_);  // records on first use (registers step_groups)
    for (const auto& [id, upload, device] : p.step_inputs) {
      const std::span<const int32_t> values = step.for_role(plan.buffers[size_t(id)].role);
      std::memcpy(upload->mapped(), values.data(), values.size_bytes());
      upload->flush(0, values.size_bytes());
    }
    // Decode attention splits the keys of the step's longest sequence (OpEncoder::step_split_groups); the positions
    // are engine-checked, so max_len() is within every plan's context.
    const uint64_t longest = uint64_t(std::max<int64_t>(step.max_len(), 1));
    for (const StepSplitGroups& g : p.step_groups) {
      const auto [keys, splits] = step_key_splits(g, longest);
      const uint32_t args[4] = {g.rows, splits, 1, keys};
      std::memcpy(static_cast<std::byte*>(p.step_args_upload->mapped()) + g.slot * StepArgs::kSlotBytes, args,
                  sizeof args);
      p.step_args_upload->flush(g.slot * StepArgs::kSlotBytes, sizeof args);
    }

    const int64_t submitted_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch()).count();
    seq.run();
    if (step_timing_ && !profiling_)  // the timestamps are always recorded (free); reading them is the cost
      if (const std::optional<double> span = seq.span_seconds()) p.set_run_device_seconds(*span);
    p.logits_fresh = p.logits_readback && range.end == plan.ops.size();
    if (profiling_ && seq.profiling()) {
      for (const DispatchTiming& t : seq.timings()) {
        if (t.label.empty() || !std::isdigit(static_cast<unsigned char>(t.label[0]))) continue;  // the read-back copy
        const size_t op = std::stoul(t.label);
        if (op >= p.mutable_op_seconds().size()) continue;
        p.mutable_op_seconds()[op] += t.duration_ns() * 1e-9;
        p.op_spans().push_back({op, submitted_ns + int64_t(t.start_ns), submitted_ns + int64_t(t.end_ns)});
      }
    }
  }

  void read(engine::PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<float> dst) override {
    auto& p = dynamic_cast<VkPlan&>(prepared);
    const BufferSpan s = checked_span(p, buffer, offset, dst.size());
    if (dst.empty()) return;
    const engine::ElemType type = p.plan().buffers[size_t(buffer)].type;
    if (type == engine::ElemType::Q8_0 || type == engine::ElemType::F16) {  // Q8_0: whole blocks (checked_span)
      std::vector<uint32_t> raw((s.size + 3) / 4);
      transfer_->download(s, raw.data(), s.size);
      engine::floats_from_elems(type, raw.data(), dst);
      return;
    }
    if (type == engine::ElemType::I32) {  // ids (MoE experts) as floats, as the CPU backend reads them
      std::vector<int32_t> ids(dst.size());
      transfer_->download(s, ids.data(), s.size);
      std::transform(ids.begin(), ids.end(), dst.begin(), [](int32_t v) { return float(v); });
      return;
    }
    if (buffer == p.plan().logits && p.logits_fresh) {
      const uint64_t at = uint64_t(offset) * 4;
      p.logits_readback->invalidate(at, dst.size_bytes());
      std::memcpy(dst.data(), static_cast<const std::byte*>(p.logits_readback->mapped()) + at, dst.size_bytes());
      return;
    }
    transfer_->download(s, dst.data(), dst.size_bytes());
  }

  // The logits of the plan's last full execute, in the mapped read-back buffer the step's command buffer copied them
  // to; nothing else lives in host memory.
  std::span<const float> view(engine::PreparedPlan& prepared, BufferId buffer, int64_t offset, size_t count) override {
    auto& p = dynamic_cast<VkPlan&>(prepared);
    if (buffer != p.plan().logits || !p.logits_fresh || count == 0) return {};
    checked_span(p, buffer, offset, count);
    const uint64_t at = uint64_t(offset) * 4;
    p.logits_readback->invalidate(at, count * 4);
    return {reinterpret_cast<const float*>(static_cast<const std::byte*>(p.logits_readback->mapped()) + at), count};
  }

  void write(engine::PreparedPlan& prepared, BufferId buffer, int64_t offset, std::span<const float> src) override {
    auto& p = dynamic_cast<VkPlan&>(prepared);
    const BufferSpan s = checked_span(p, buffer, offset, src.size());
    if (buffer == p.plan().logits) p.logits_fresh = false;
    if (src.empty()) return;
    const engine::ElemType type = p.plan().buffers[size_t(buffer)].type;
    if (type == engine::ElemType::Q8_0 || type == engine::ElemType::F16) {  // as kv_write does on the device
      std::vector<uint32_t> raw((s.size + 3) / 4);
      engine::elems_from_floats(type, src, raw.data());
      transfer_->upload(s, raw.data(), s.size);
    } else if (type == engine::ElemType::I32) {  // ids (MoE experts; verify's resync) from floats
      std::vector<int32_t> ids(src.size());
      std::transform(src.begin(), src.end(), ids.begin(), [](float v) { return int32_t(v); });
      transfer_->upload(s, ids.data(), s.size);
    } else {
      transfer_->upload(s, src.data(), src.size_bytes());
    }
    context_->queue().wait_all();
  }

private:
  // The tuning cache's entries for this device that the device can run; the rest is ignored with one warning.
  void load_tuning() {
    std::string warning;
    const TuningCache cache = TuningCache::load(tuning_path_, warning);
    if (!warning.empty()) context_->warn(warning);
    const auto* entries = cache.entries(device_key_);
    if (!entries) return;
    size_t invalid = 0;
    for (const auto& [shape, entry] : *entries) {
      if (matmul_config_valid({shape.kernel, entry.tile})) tuned_[shape] = entry;
      else ++invalid;
    }
    if (invalid)
      context_->warn(cat("ignoring ", invalid, " tuned matmul tile(s) in ", tuning_path_, " that ",
                         context_->info().name, " cannot run (re-run greta-vk tune --force)"));
  }

  BufferSpan checked_span(VkPlan& p, BufferId buffer, int64_t offset, size_t count) const {
    const auto& decls = p.plan().buffers;
    GRETA_CHECK(buffer >= 0 && size_t(buffer) < decls.size(), "buffer ", buffer);
    const engine::BufferDecl& b = decls[size_t(buffer)];
    GRETA_CHECK(offset >= 0 && offset + int64_t(count) <= b.elems, "range of ", b.name);
    // Q8_0 buffers (KV caches, engine/kv_q8.h) are read and written in whole blocks of 32 elements.
    if (b.type == engine::ElemType::Q8_0)
      GRETA_CHECK(offset % engine::kKvQ8Block == 0 && int64_t(count) % engine::kKvQ8Block == 0, "range of ", b.name,
                  " (", offset, " + ", count, ") is not whole q8_0 blocks");
    const BufferSpan whole = p.spans[size_t(buffer)];
    return {whole.buffer, whole.offset + engine::elem_bytes(b.type, offset),
            engine::elem_bytes(b.type, int64_t(count))};
  }

  // The recorded commands for ops [range) of the plan, recorded on first use.
  RecordedSequence& sequence(VkPlan& p, engine::OpRange range, bool profile) {
    auto& slot = p.sequences[{range.begin, range.end, profile}];
    if (slot) return *slot;
    slot = std::make_unique<RecordedSequence>(*context_, cat("ops ", range.begin, "..", range.end),
                                              SequenceOptions{.profile = profile, .span = true});
    const OpEncoder::Resources resources{context_,    pipelines_, allocator_.get(),
                                         transfer_.get(),   &weights_,        &p.spans,
                                         &p.plan().buffers, &p.constants,     options_.matmul,
                                         f16_attention_,    int8_activations(), &p.tuning,
                                         &p.step_groups,
                                         StepArgs{&*p.step_args_upload, p.step_args_device->span()},
                                         &options_.switches};
    const auto& ops = p.plan().ops;
    // Fusions (fusion.h): decode's rmsnorm, swiglu, rope and KV writes run inside other ops' dispatches, residual
    // adds inside matmuls. Never within single-op ranges (verify mode), so each op is still checked on its own.
    const MoeInputCheck moe_takes_input = [&](const engine::MoeMatMulOp& op) {
      const DeviceWeight& w = weights_[size_t(op.weight)];
      return moe_matvec_takes_input(op, w.type, w.matrix.chunk_count());
    };
    const std::vector<OpRecord> records =
        plan_records(p.plan(), range, *options_.fusions, options_.matmul, moe_takes_input);
    slot->record([&](Recorder& r) {
      // The step's inputs and indirect-dispatch sizes into device memory first (VkPlan::step_inputs).
      for (const auto& [id, upload, device] : p.step_inputs) r.copy(upload->span(), device, "step inputs to the device");
      r.copy(p.step_args_upload->span(), p.step_args_device->span(), "step inputs to the device");
      r.barrier(/*indirect_arguments=*/true);
      OpEncoder e(r, resources);
      // Barriers only where an op depends on one since the last barrier (read-after-write, write-after-read,
      // write-after-write on a plan buffer): independent ops (Q, K and V projections, gate and up, the K and V
      // cache writes) run concurrently. Weights are never written, so only plan buffers are tracked.
      std::set<engine::BufferId> written, read;
      std::optional<RopeParts> rope_parts;  // Q, K and V doing the rope_kv record's work (rope_kv_parts)
      for (size_t i = range.begin; i < range.end; ++i) {
        const OpRecord& rec = records[i - range.begin];
        if (rec.kind == OpRecord::Kind::absorbed) {
          p.variants[i] = cat("(fused into ", ops[rec.into].label, ")");
          continue;
        }
        if (rope_parts && i == rope_parts->rope_kv) {  // done: the caches now hold the step's K and V rows
          p.variants[i] = "(done by the Q, K and V projections)";
          written.insert(rec.writes.begin(), rec.writes.end());
          rope_parts.reset();
          continue;
        }
        if (!rope_parts && rec.kind == OpRecord::Kind::matmul && rec.matmul.norm &&
            (*options_.fusions & kFuseRopeOut) && (*options_.fusions & kFuseRopeKv))
          rope_parts = rope_kv_parts(records, range, i, e);
        bool hazard = false;
        for (engine::BufferId b : rec.writes) hazard = hazard || written.count(b) || read.count(b);
        for (engine::BufferId b : rec.reads) hazard = hazard || written.count(b);
        const std::vector<OpEncoder::SumReader> takes = split_sum_readers(rec, ops[i].op);
        if (hazard) {
          r.barrier();
          // The split-K sums of the stage's GEMMs in a stage of their own, but those this op adds itself.
          e.flush_split_sums(takes);
          written.clear();
          read.clear();
        }
        written.insert(rec.writes.begin(), rec.writes.end());
        for (const OpEncoder::SumReader& t : takes)
          if (e.split_sum_handed(t.id)) written.insert(t.id);  // the op writes the sums back
        read.insert(rec.reads.begin(), rec.reads.end());
        e.begin_op(i, &p.variants[i]);
        // A MoE layer's router (a matvec with the ffn_norm fused) starts a stage: the int8 copy of the same
        // normalized rows that the expert gate and up projections read after the route is made beside it, rather
        // than in a stage of its own between the route and the experts.
        if (rec.kind == OpRecord::Kind::matmul && rec.matmul.norm && e.at_barrier())
          if (const auto src = moe_q8_input_after(records, range, i, ops, e)) e.q8_prefetch(*src);
        if (rec.kind == OpRecord::Kind::rope_kv) {
          encode_rope_kv(e, *rec.rope_kv);
        } else if (rec.kind == OpRecord::Kind::moe_matmul) {
          encode_moe_matmul(e, std::get<engine::MoeMatMulOp>(ops[i].op), &*rec.moe);
        } else if (rec.kind == OpRecord::Kind::combine_residual) {
          // With the next layer's first matvecs quantizing the stream's norm, the combine makes that int8 input too.
          const std::optional<Q8Source> next = norm_q8_input_after(records, range, i, rec.combine->out, e);
          if (next && moe_combine_makes(*rec.combine, *next)) encode_moe_combine_q8(e, *rec.combine, *next);
          else encode_moe_combine(e, *rec.combine, /*accumulate=*/true);
        } else if (rec.kind == OpRecord::Kind::matmul) {
          MatmulArgs args = rec.matmul;
          if (args.accumulate && (*options_.fusions & kFuseNormOut))  // the next layer's norm, as int8
            args.norm_out = norm_q8_input_after(records, range, i, args.op.out, e);
          if (rope_parts && rope_parts->part(i))
            args.rope_out = RopeOut{*records[rope_parts->rope_kv - range.begin].rope_kv, rope_parts->part(i)};
          if (args.norm || args.swiglu || args.bias || args.route || args.glu_pair) encode_matvec(e, args);
          else encode_matmul(e, args.op, args.accumulate, args.norm_out);
        } else {
          std::visit(
              [&](const auto& op) {
                using T = std::decay_t<decltype(op)>;
                if constexpr (std::is_same_v<T, engine::EmbedOp>) encode_embed(e, op);
                else if constexpr (std::is_same_v<T, engine::RmsNormOp>) {
                  const GemmCopies c = gemm_reads(records, range, i, op.out, op.rows * op.width, ops, e);
                  encode_rmsnorm(e, op, op.width % 4 == 0 && c.f16, op.width % 32 == 0 && c.q8);
                }
                else if constexpr (std::is_same_v<T, engine::MatMulOp>) encode_matmul(e, op);
                else if constexpr (std::is_same_v<T, engine::AddBiasOp>) encode_add_bias(e, op);
                else if constexpr (std::is_same_v<T, engine::RopeOp>) encode_rope(e, op);
                else if constexpr (std::is_same_v<T, engine::KvWriteOp>) encode_kv_write(e, op);
                else if constexpr (std::is_same_v<T, engine::AttentionOp>)
                  encode_attention(e, op, gemm_reads(records, range, i, op.out,
                                                     op.n_tokens * op.n_heads * op.head_dim_v, ops, e).f16);
                else if constexpr (std::is_same_v<T, engine::GluOp>)
                {
                  const GemmCopies c = gemm_reads(records, range, i, op.out, op.elems, ops, e);
                  encode_glu(e, op, c.f16, c.q8 && c.q8->cols % 32 == 0 ? c.q8 : std::nullopt);
                }
                else if constexpr (std::is_same_v<T, engine::GatherRowsOp>) encode_gather_rows(e, op);
                else if constexpr (std::is_same_v<T, engine::AddOp>) encode_add(e, op);
                else if constexpr (std::is_same_v<T, engine::MoeRouteOp>) encode_moe_route(e, op);
                else if constexpr (std::is_same_v<T, engine::MoeMatMulOp>) encode_moe_matmul(e, op);
                else if constexpr (std::is_same_v<T, engine::MoeCombineOp>) encode_moe_combine(e, op);
                else static_assert(!sizeof(T), "an op kind without a Vulkan encoder");
              },
              ops[i].op);
        }
        e.note_written(rec.writes);
      }
      e.flush_split_sums();
      if (p.logits_readback && range.end == ops.size()) {
        r.barrier();
        r.copy(p.spans[size_t(p.plan().logits)], p.logits_readback->span(), "logits read-back");
      }
    });
    context_->queue().wait_all();  // constant buffers uploaded while encoding
    return *slot;
  }

  VkBackendOptions options_;
  // Destruction order (reverse of declaration): weights and KV cache, then transfer, allocator, and the device with
  // its pipelines when no other backend shares it.
  std::shared_ptr<SharedVkDevice> device_;
  Context* context_ = nullptr;      // device_'s
  Pipelines* pipelines_ = nullptr;  // device_'s
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Transfer> transfer_;
  std::vector<DeviceWeight> weights_;
  // Persistent buffers (the KV cache) by name: the newest (largest) buffer of each, shared with the plans using it.
  struct Persistent {
    std::shared_ptr<Buffer> buffer;
    engine::ElemType type = engine::ElemType::F32;
  };
  std::map<std::string, Persistent> persistent_;
  uint64_t in_place_bytes_ = 0;  // weights used in place from the mapped file (imported host memory)
  uint64_t copied_bytes_ = 0;    // matrices of the mapped file that could not be imported (copied instead)
  bool f16_attention_ = true;  // false for models whose matrices are mostly F32 (their users asked for f32 accuracy)
  DeviceKey device_key_;
  std::string tuning_path_;                            // the tuning cache file ("" without a cache directory)
  std::map<MatmulShapeClass, TunedEntry> tuned_;       // its valid entries for this device
  std::optional<MatmulConfig> forced_matmul_;          // set_matmul_config
};

template <class B>  // engine::Backend or const engine::Backend
auto& as_vk(B& backend, const char* what) {
  auto* vk = dynamic_cast<std::conditional_t<std::is_const_v<B>, const VkBackend, VkBackend>*>(&backend);
  if (!vk) fail(what, " needs a Vulkan backend");
  return *vk;
}

}  // namespace

std::unique_ptr<engine::Backend> create_vk_backend(const VkBackendOptions& options) {
  return std::make_unique<VkBackend>(options);
}

std::string describe_kernels(const engine::PreparedPlan& prepared) {
  const auto* p = dynamic_cast<const VkPlan*>(&prepared);
  GRETA_CHECK(p, "describe_kernels needs a plan prepared by the Vulkan backend");
  std::string out;
  const auto& ops = p->plan().ops;
  for (size_t i = 0; i < ops.size(); ++i)
    out += cat(ops[i].label, "  ", p->variants[i].empty() ? "(not recorded)" : p->variants[i], "\n");
  return out;
}

std::vector<std::string> validation_messages(const engine::Backend& backend) {
  const auto* vk = dynamic_cast<const VkBackend*>(&backend);
  GRETA_CHECK(vk, "validation_messages needs a Vulkan backend");
  return vk->context().validation_log()->messages();
}

bool uses_cooperative_matrix(const engine::Backend& backend) {
  const auto* vk = dynamic_cast<const VkBackend*>(&backend);
  GRETA_CHECK(vk, "uses_cooperative_matrix needs a Vulkan backend");
  return vk->cooperative_matrix();
}

bool uses_int8_activations(const engine::Backend& backend) {
  const auto* vk = dynamic_cast<const VkBackend*>(&backend);
  GRETA_CHECK(vk, "uses_int8_activations needs a Vulkan backend");
  return vk->int8_activations();
}

void set_matmul_config(engine::Backend& backend, std::optional<MatmulConfig> config) {
  as_vk(backend, "set_matmul_config").set_matmul_config(config);
}

bool matmul_config_valid(const engine::Backend& backend, const MatmulConfig& config) {
  return as_vk(backend, "matmul_config_valid").matmul_config_valid(config);
}

GemmKernel automatic_gemm_kernel(const engine::Backend& backend, model::GgmlType type) {
  return as_vk(backend, "automatic_gemm_kernel").automatic_gemm_kernel(type);
}

DeviceKey tuning_device_key(const engine::Backend& backend) { return as_vk(backend, "tuning_device_key").device_key(); }

bool runs_on_cpu_device(const engine::Backend& backend) { return as_vk(backend, "runs_on_cpu_device").cpu_device(); }

std::string tuning_cache_path(const engine::Backend& backend) {
  return as_vk(backend, "tuning_cache_path").tuning_path();
}

bool vulkan_device_available() {
  try {
    for (const auto& d : list_devices())
      if (d.usable) return true;
  } catch (const Error&) {
  }
  return false;
}

bool vulkan_gpu_available(std::string* cpu_device) {
  try {
    for (const auto& d : list_devices()) {
      if (!d.usable) continue;
      if (d.type != VK_PHYSICAL_DEVICE_TYPE_CPU) return true;
      if (cpu_device && cpu_device->empty()) *cpu_device = d.name;
    }
  } catch (const Error&) {
  }
  return false;
}

}  // namespace greta::vk
