// The C entry points of the HIP plugin (libgreta_hip.so, or libgreta_hip_cuda.so from the nvcc build), as the loader
// (hip_loader.cpp) resolves them with dlsym. Host-only, no HIP headers: both sides include this file.
//
// Versioning: greta_hip_plugin_abi() must return kGretaHipPluginAbi; the loader refuses any other plugin, so a stale
// plugin next to a newer executable fails with a clear message instead of crashing. The backend object crosses the
// boundary as engine::Backend*, so the plugin must be built from the same sources as the executable (the build does
// that: both come from one CMake tree).
#pragma once
#include <cstddef>
#include <cstdint>

namespace greta::engine {
class Backend;
}

// 2: create_backend takes a device memory limit; 3: and use_graphs; 4: engine::Backend and PreparedPlan gained step
// timing members (the object layouts that cross the boundary changed).
inline constexpr int kGretaHipPluginAbi = 4;

struct GretaHipDeviceInfo {
  int index;
  char name[256];
  char arch[64];          // "gfx942:sramecc+:xnack-", "sm_90"
  char platform[16];      // "amd" | "nvidia"
  int wave_size;
  int compute_units;
  int matrix_cores;       // this build has matrix-core kernels for the device
  double clock_ghz;
  double memory_gbps;     // approximate (memory clock x bus width)
  double peak_fp16_tflops;  // dense matrix-core peak, approximate (clock x units x per-unit rate)
  double peak_fp32_tflops;
  uint64_t memory_bytes;
};

extern "C" {
typedef int (*GretaHipPluginAbiFn)(void);
// "amd gfx942;gfx90a;gfx1100;gfx1103" or "nvidia sm_90": what this plugin was built for.
typedef const char* (*GretaHipPluginTargetsFn)(void);
// Number of devices (>= 0); -1 when the runtime reports an error, with its message in `error`.
typedef int (*GretaHipDeviceCountFn)(char* error, size_t error_size);
// 0 on success; -1 with a message.
typedef int (*GretaHipDeviceInfoFn)(int index, GretaHipDeviceInfo* info, char* error, size_t error_size);
// A new backend on device `index`, owned by the caller (delete through the virtual destructor); null with a message.
// `device_memory_limit`: bytes it may use on the device at most (0: no limit); `use_graphs`: 0 turns off graph
// capture of whole steps (HipBackendOptions).
typedef greta::engine::Backend* (*GretaHipCreateBackendFn)(int index, uint64_t device_memory_limit, int use_graphs,
                                                          char* error, size_t error_size);
}
