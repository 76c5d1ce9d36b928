// The Vulkan backend: engine::Backend on one Vulkan device. Only the CLI and the tests include this header; the
// engine sees an engine::Backend.
//
//   load_weights  matrices are uploaded once in their GGUF format (quantized blocks as stored; the kernels
//                 dequantize), split into several buffers at whole rows when one binding cannot hold them
//                 (memory.h: SplitBuffer); 1-row weights (norms, biases, rope factors) are decoded to f32 on the host.
//                 On unified memory (integrated GPUs, lavapipe) matrices are imported in place from the mapped file
//                 where the driver allows (VK_EXT_external_memory_host), else copied into mapped device memory.
//   prepare       device buffers for the plan (the KV page pool shared by name across plans, and enlarged with its
//                 contents kept when a plan declares it larger), then every op encoded once by its op_*.cpp into a
//                 command buffer that each step resubmits. F16 buffers (KV caches) take 2 bytes per element.
//   execute       the step input (token ids, positions, KV rows, sequence rows, page table, logit rows) is written
//                 into host-visible buffers, the recorded commands are submitted, and the step waits on a timeline
//                 semaphore. A sub-range of ops (verify mode) gets its own recorded command buffer, made on first use.
// GRETA_VK_LOG_KERNELS=1 prints the kernels (shader variants) each op of every prepared plan uses to stderr.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "vk/backend/experiment_switches.h"
#include "vk/backend/tuning.h"

namespace greta::vk {

// A Vulkan device with the kernels compiled on it, for several backends on one device (VkBackendOptions::
// shared_device): each backend keeps its own weights, buffers and recorded plans, and the device, its queue and its
// pipelines are made once. Backends that share one must not run at the same time (one queue, one pipeline map).
// The test suites share one per process: with a backend per test case, compiling the same kernels again was most of
// their time on lavapipe.
struct SharedVkDevice;
// `spin_wait_us`: ContextOptions::spin_wait_us (unset: the context's rule).
std::shared_ptr<SharedVkDevice> open_shared_vk_device(int device = -1, bool validation = false,
                                                      const std::string& cache_dir = {},
                                                      std::optional<uint64_t> spin_wait_us = std::nullopt);

// Which matrix-matrix kernel prefill matmuls use.
enum class MatmulKernel {
  automatic,  // cooperative matrices when the device has the 16x16x16 f16 shape, else the tiled scalar kernel
  tiled,      // matmul_tiled (scalar f32, shared-memory tiles)
  coopmat,    // matmul_coopmat (fails at prepare when the device or the build lacks it)
  matvec,     // the decode kernel for every token (slow for prefill; a reference point)
};

struct VkBackendOptions {
  int device = -1;           // `greta-vk devices` index; -1: the default device
  bool validation = false;   // Khronos validation layer (also GRETA_VK_VALIDATION=1)
  MatmulKernel matmul = MatmulKernel::automatic;  // automatic: by the op's shape and the device (op_matmul.cpp)
  std::string cache_dir;     // pipeline and tuning cache directory; empty: the default (pipelines.h)
  // Load greta-vk tune's tiles for this device from <cache dir>/vk-matmul-tuning.txt (tuning.h). A corrupt file or
  // entries the device cannot run are ignored with a warning.
  bool tuning_cache = true;
  // Fusions (backend/fusion.h: kFuseResidual 1 | kFuseNorm 2 | kFuseRopeKv 4 | kFuseSwiglu 8 ...). Unset: all of
  // them with int8 activations (below), where the activation quantizer applies silu once per row; else all but
  // swiglu, which made decode slower on the H100 (every down-projection workgroup recomputes silu over the whole row;
  // docs/benchmarks.md).
  std::optional<unsigned> fusions;
  // Decode matvecs of quantized weights quantize their input to int8 per 32 elements and take integer dot products
  // (op_matvec.cpp). Unset: where the device's packed int8 dot product is accelerated (DeviceInfo::
  // integer_dot_product_accelerated); lavapipe emulates it, and its decode steps ran 3x slower on them than on f32
  // activations. true: wherever shaderIntegerDotProduct exists (tests of the int8 kernels on lavapipe); false: never.
  std::optional<bool> q8_activations;
  // Device-local bytes the backend may use at most (0: the device's): its memory_capacity() and every allocation
  // keep within it (`--device-memory-limit`, to run as a smaller GPU would).
  uint64_t device_memory_limit = 0;
  // On unified memory with VK_EXT_external_memory_host (DeviceInfo::imports_host_memory), matrices are used in place
  // from the mapped model file instead of being copied; tests turn it off to cover the copy.
  bool import_host_weights = true;
  // When set, the backend runs on this device and uses its pipelines (device, validation and cache_dir above are
  // then unused); otherwise it opens its own.
  std::shared_ptr<SharedVkDevice> shared_device;
  // Kernel choices forced for measurements and tests (GRETA_VK_MATMUL, _FUSE, _MATVEC_Q8 override the options above;
  // experiment_switches.h lists them all). None by default; the benches and tests pass ExperimentSwitches::
  // from_environment().
  ExperimentSwitches switches;
};

std::unique_ptr<engine::Backend> create_vk_backend(const VkBackendOptions& options = {});

// Names of the kernels (shader variants) each op of a prepared plan uses, one line per op: "blk.0.attn_q
// matmul_coopmat_q4_0 (n_tokens 64)". For tests and `greta-vk bench --profile`. The plan must come from a Vulkan
// backend.
std::string describe_kernels(const engine::PreparedPlan& plan);

// True when a usable Vulkan device exists; never throws.
bool vulkan_device_available();
// True when a usable Vulkan device that is not a CPU implementation exists (the CLI's default-backend choice: on
// lavapipe alone the CPU backend is far faster). Otherwise, when `cpu_device` is given, it receives the first usable
// CPU implementation's name (empty when there is none). Never throws.
bool vulkan_gpu_available(std::string* cpu_device = nullptr);

}  // namespace greta::vk

namespace greta::vk {
// Messages the Khronos validation layer reported so far on this backend's instance (empty without validation).
// Tests fail on any. `backend` must come from create_vk_backend.
std::vector<std::string> validation_messages(const engine::Backend& backend);
// True when the backend's device (and this build) has the 16x16x16 f16 cooperative-matrix matmul, which prefill
// matmuls with non-F32 weights then use (f16 operands: NMSE ~1e-7..1e-6 per op instead of ~1e-13).
bool uses_cooperative_matrix(const engine::Backend& backend);
// True when the backend's decode matvecs of quantized weights take int8 activations (VkBackendOptions::
// q8_activations, by default on a device with accelerated integer dot products): NMSE ~1e-5 per such op against the
// f32 reference.
bool uses_int8_activations(const engine::Backend& backend);

// Prefill matmul tiles (tuning.h). `backend` must come from create_vk_backend.
// Plans prepared after this call run their prefill (matrix-matrix) matmuls on `config`'s kernel and tile, whatever
// the options, the environment and the tuning cache say (greta-vk tune's candidates, tests); nullopt restores the
// usual choice. prepare() fails when the tile is not valid on the device.
void set_matmul_config(engine::Backend& backend, std::optional<MatmulConfig> config);
// Whether `config` can run on the backend's device: the kernel exists there and the tile keeps its limits.
bool matmul_config_valid(const engine::Backend& backend, const MatmulConfig& config);
// The kernel automatic prefill matmuls use for weights of `type` on the backend's device.
GemmKernel automatic_gemm_kernel(const engine::Backend& backend, model::GgmlType type);
// The backend's device as the tuning cache names it, and the cache file it reads ("" when nothing is persisted).
DeviceKey tuning_device_key(const engine::Backend& backend);
// Whether the backend's device is a CPU implementation (lavapipe): no cache to flush, timings only indicative.
bool runs_on_cpu_device(const engine::Backend& backend);
std::string tuning_cache_path(const engine::Backend& backend);
}  // namespace greta::vk
