// The HIP backend: engine::Backend on one HIP device (or, in the nvcc build, one CUDA device through gpu_api.h).
//
//   load_weights  matrices are uploaded in their stored format (quantized blocks as they are in the file) through two
//                 pinned staging buffers; 1-row weights (norms, biases, rope factors) are decoded to fp32 on the host
//   prepare       every plan buffer from the device memory pool; the KV cache (persistent buffers, f32, f16 or q8_0
//                 blocks of 32 as engine/kv_q8.h: the kernels read them through kv_cache.h's accessors) shared
//                 by name across plans, enlarged (contents copied, the rest zeroed) when a later plan declares it
//                 larger; the step-input buffers (tokens, positions, KV rows, sequence rows, page table, logit rows)
//                 back to back in one device allocation mirrored by one pinned staging area; scratch for the GEMM's
//                 fp16 activations and the split-K attention partials
//   execute       the step input goes up through the pinned staging area in one copy, then the ops run on one
//                 stream. A full-range step without profiling is captured once into a graph and replayed on later
//                 steps (kernels read positions, KV rows and page tables from the device, grids depend only on the
//                 plan's shape, every device address is fixed at prepare, so the graph stays valid); profiling and
//                 verify mode (single ops) launch the kernels directly, profiling between events
//   read / write  synchronous copies of F32, F16, Q8_0 or I32 buffer ranges, converted on the host (F16: round to
//                 nearest even; Q8_0: whole blocks of 32, kv_q8_quantize / kv_q8_value; I32, the MoE expert ids: as
//                 floats)
// Kernel choice (as the Vulkan backend's): matmul with n_tokens <= kMatvecTokens, or with an F32 weight, uses the fp32
// matvec; larger batches of other weight types the matrix-core GEMM (fp16 operands, fp32 accumulation). Expert
// matmuls (MoeMatMulOp) follow the same rule: the per-slot fp32 matvec reading only the chosen experts' rows, or the
// grouped GEMM (slots grouped by expert on the device, one launch over (expert, tile); k_moe.hip). Attention
// with >= 16 tokens uses flash attention on matrix cores (fp16 Q, K, P, V), fewer the fp32 split-K kernel; a model
// with F32 weight matrices (expert biases, [n_experts, out] F32, do not count) keeps fp32 attention throughout (its users asked for f32 accuracy, and its goldens
// hold it to 1e-9). The choice depends on the plan's n_tokens only (a captured graph must not change), not on how
// the step splits into sequences: a step of >= 16 decode tokens of different sequences runs flash attention with
// one-row runs (correct, but each 16-row tile then walks every run's keys in turn; routing such tokens to the
// split-K kernel is a possible speed-up).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "hip/device.h"
#include "hip/kernels.h"

namespace greta::hip {

struct HipBackendOptions {
  int device = 0;
  // Device bytes the backend may use at most (0: the device's): its memory_capacity() and the memory pool keep within
  // it (`--device-memory-limit`, to run as a smaller GPU would).
  uint64_t device_memory_limit = 0;
  bool use_graphs = true;  // graph capture of whole steps (off: bench and tests with GRETA_HIP_NO_GRAPHS=1)
};

class HipPlan;

class HipBackend : public engine::Backend {
public:
  explicit HipBackend(const HipBackendOptions& options = {});
  ~HipBackend() override;

  std::string name() const override;
  uint64_t memory_capacity() const override;
  void load_weights(std::span<const engine::WeightDesc> weights) override;
  std::unique_ptr<engine::PreparedPlan> prepare(const engine::Plan& plan) override;
  void execute(engine::PreparedPlan& plan, const engine::StepInput& step, engine::OpRange range) override;
  using engine::Backend::execute;
  void read(engine::PreparedPlan& plan, engine::BufferId buffer, int64_t offset, std::span<float> dst) override;
  void write(engine::PreparedPlan& plan, engine::BufferId buffer, int64_t offset, std::span<const float> src) override;

  const DeviceProps& device() const { return props_; }

private:
  struct Weight {
    DeviceWeight view;                    // matrices: stored format
    std::unique_ptr<PoolBuffer> memory;
    std::unique_ptr<PoolBuffer> vector;   // 1-row weights: fp32 copy
    bool f32_matrix = false;              // an F32 weight of several rows
  };

  void run_op(HipPlan& plan, const engine::PlanOp& op);
  bool use_gemm(WType type, int64_t n_tokens) const;
  bool use_flash_attention(const HipPlan& plan, const AttentionArgs& a) const;
  const Weight& weight(engine::WeightId id) const;
  const float* vector_weight(engine::WeightId id) const;
  // An fp32 view of at least `elems` values of a weight: its fp32 copy (1-row weights) or its data when stored F32
  // (expert biases [n_experts, out_features]).
  const float* float_weight(engine::WeightId id, int64_t elems) const;
  void upload(uint8_t* dst, const void* src, size_t bytes);
  // Makes this backend's device the thread's current one. The runtime's current device is per thread, not per object,
  // and allocations, kernel launches and memory queries go to it: with a backend on each of two GPUs (a layer split),
  // the one created last would otherwise receive the other's work. Every entry point calls it first.
  void use_device() const;

  HipBackendOptions options_;
  DeviceProps props_;
  LaunchCtx ctx_;
  // Declaration order is destruction order in reverse: buffers return to the pool before it is destroyed, and the
  // pool is destroyed before the stream.
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<MemoryPool> pool_;
  std::vector<Weight> weights_;
  struct Persistent {
    std::shared_ptr<PoolBuffer> memory;
    engine::ElemType type = engine::ElemType::F32;
    int64_t elems = 0;
  };
  std::map<std::string, Persistent> persistent_;  // KV cache by buffer name
  std::unique_ptr<PinnedMemory> staging_[2];
  std::unique_ptr<Event> staging_done_[2];
};

}  // namespace greta::hip
