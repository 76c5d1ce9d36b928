// The executable's side of the HIP plugin: finds libgreta_hip.so (AMD, built with clang) or libgreta_hip_cuda.so
// (NVIDIA, built with nvcc) next to the executable, loads the GPU runtime it needs and the plugin with dlopen, and
// hands out its devices and backends. Plain C++ (no HIP headers): greta-vk links this, never the plugin or a GPU
// runtime, so the same binary runs every other backend on a machine without ROCm.
//
// Search order: $GRETA_HIP_PLUGIN (a path) if set; else libgreta_hip.so, then libgreta_hip_cuda.so in the directory
// of the running executable. For the AMD plugin the HIP runtime (libamdhip64.so.6, .so.5, .so; also under
// $ROCM_PATH/lib and /opt/rocm/lib) is loaded first with RTLD_GLOBAL: the plugin is linked without it (the build
// machines have no ROCm) and its HIP symbols resolve against it at load time. The CUDA plugin carries the CUDA
// runtime statically and needs only the driver.
//
// Every failure is one line that says what is missing: the plugin (this build has no HIP backend), the HIP runtime
// library, a plugin of another version, or a device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "hip/plugin_api.h"

namespace greta::hip {

struct PluginInfo {
  std::string path;     // the plugin file loaded
  std::string runtime;  // the runtime library loaded for it ("libamdhip64.so.6"), or "" (CUDA: linked in)
  std::string targets;  // "amd gfx942,gfx90a,gfx1100,gfx1103" | "nvidia sm_90"
};

// Loads the plugin once per process (later calls return the first outcome). Throws greta::Error with one line.
const PluginInfo& load_plugin();

// Devices of the loaded plugin. Throws (one line) when the plugin does not load or the runtime reports an error;
// an empty list is "the runtime works but sees no device".
std::vector<GretaHipDeviceInfo> list_devices();

// A backend on device `index` (-1: device 0). Throws one line: plugin/runtime missing, no device, bad index, or
// whatever the plugin's backend constructor reports (e.g. no code for this GPU's architecture).
// `device_memory_limit` > 0 caps what it may use on the device (`--device-memory-limit`); `use_graphs` false turns
// off graph capture of whole steps (measurements: graphs_from_environment).
std::unique_ptr<engine::Backend> create_backend(int index, uint64_t device_memory_limit = 0, bool use_graphs = true);

// GRETA_HIP_NO_GRAPHS=1 (any value but 0) in the environment: create_backend's use_graphs false. Read by
// `greta-vk bench` and the HIP tests only, as the Vulkan backend's experiment switches are, so that `run`, `chat` and
// `serve` never depend on a shell's variables.
bool graphs_from_environment();

// For `greta-vk devices`: the HIP devices as text (one block per device), or one line saying why there are none.
std::string describe_devices();

}  // namespace greta::hip
