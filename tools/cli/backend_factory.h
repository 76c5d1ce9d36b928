// The one place that maps `--backend cpu|vk|hip` (with --device and --threads) to an engine::Backend. Commands that
// run a model take their backend options from here, so every command accepts the same ones and reports the same
// errors. Backends that this binary was built without are still listed: choosing one fails with a one-line
// message instead of an "unknown backend" error.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "args.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/split_backend.h"

namespace greta::cli {

struct BackendRequest {
  std::string name;     // "cpu", "vk", "hip"; empty: the default (vk when a Vulkan device and backend exist, else cpu)
  int64_t device = -1;  // GPU index (--device N, as `greta-vk devices` numbers them); -1: the backend's default
  int64_t threads = 0;  // CPU worker threads (--threads N); 0: one per hardware thread
  // Spreading a model over devices (engine/placement.h; create_model_backend):
  std::optional<int64_t> gpu_layers;  // --gpu-layers N|all|auto: blocks on the GPUs, the rest on the CPU; unset or
                                      // auto: as many as fit
  std::vector<int64_t> devices;       // --devices 0,1: a layer split over these GPUs (the same index twice: two
                                      // logical devices on one GPU)
  std::vector<double> tensor_split;   // --tensor-split 3,1: shares of the blocks per GPU
  uint64_t device_memory_limit = 0;   // --device-memory-limit SIZE: what the engine may use on each GPU (0: all)
  // The Vulkan backend reads its experiment switches (GRETA_VK_GEMM_Q8=..., src/vk/backend/experiment_switches.h)
  // and the HIP backend GRETA_HIP_NO_GRAPHS from the environment: `greta-vk bench` only, so that no other command's
  // kernels depend on a shell's variables.
  bool experiment_switches = false;
  bool spreads() const { return gpu_layers.has_value() || devices.size() > 1 || !tensor_split.empty(); }
};
inline constexpr int64_t kAllLayers = INT64_MAX;  // --gpu-layers all

struct BackendChoice {
  std::unique_ptr<engine::Backend> backend;
  std::string kind;    // "cpu", "vk", "hip": what was chosen
  std::string device;  // the device's name: the CPU model, the GPU name
  bool by_default = false;  // the request named no backend
  std::string default_note;  // why the default fell on this backend, when worth saying (a CPU-only Vulkan device)
  std::string placement;     // where the model's parts live, when it is spread over several backends
  engine::SplitBackend* split = nullptr;  // that backend (owned by `backend`, later by the engine), else null
};

// Creates the requested backend. Throws greta::Error with one line for an unknown name, a backend this binary was
// built without ("--backend vk: the Vulkan backend is not built into this binary yet"), a device index on a backend
// without devices, or a bad thread count.
BackendChoice create_backend(const BackendRequest& request);

// The backend for one model: create_backend's when the model fits the GPU (or the request names the CPU), else, and
// whenever the request spreads the model (--devices with several GPUs, --gpu-layers, --tensor-split), an
// engine::SplitBackend over the GPUs and, for the blocks they do not take, the CPU. Throws greta::Error with one line
// for split options on the CPU backend or a part that fits no device.
BackendChoice create_model_backend(const BackendRequest& request, const model::ModelConfig& config,
                                   const engine::ModelWeights& weights, const engine::EngineOptions& options);

// "cpu, vk, hip": every name --backend accepts, built in or not.
std::string backend_names();

// The options create_backend and create_model_backend read, for a command's option table (--backend, --device,
// --threads, --gpu-layers, --devices, --split-mode, --tensor-split, --device-memory-limit).
std::span<const OptionSpec> backend_option_specs();
BackendRequest backend_request_from(const Args& args);

// "2G", "512MiB", "1073741824" -> bytes (powers of 1024). Throws greta::Error naming --option for anything else.
uint64_t parse_byte_size(const std::string& option, const std::string& text);

// "backend: cpu (2 threads) on Intel(R) Xeon(R) ..." -- the line commands print to stderr before they load a model.
std::string describe_backend(const BackendChoice& choice);

}  // namespace greta::cli
