// The plugin's C entry points (plugin_api.h). Exceptions never cross them: failures come back as messages.
#include <cstdio>
#include <cstring>
#include <exception>

#include "hip/device.h"
#include "hip/hip_backend.h"
#include "hip/plugin_api.h"

namespace {

void set_error(char* error, size_t size, const char* message) {
  if (error && size > 0) std::snprintf(error, size, "%s", message);
}

void copy_string(char* dst, size_t size, const std::string& s) { std::snprintf(dst, size, "%s", s.c_str()); }

}  // namespace

extern "C" __attribute__((visibility("default"))) int greta_hip_plugin_abi(void) { return kGretaHipPluginAbi; }

extern "C" __attribute__((visibility("default"))) const char* greta_hip_plugin_targets(void) {
#if defined(GRETA_GPU_HIP)
  return "amd " GRETA_HIP_ARCH_LIST;
#else
  return "nvidia " GRETA_HIP_ARCH_LIST;
#endif
}

extern "C" __attribute__((visibility("default"))) int greta_hip_device_count(char* error, size_t error_size) {
  int count = 0;
  const gpuError_t e = gpuGetDeviceCount(&count);
  if (e != gpuSuccess) {
    set_error(error, error_size, gpuGetErrorString(e));
    (void)gpuGetLastError();
    return -1;
  }
  return count;
}

extern "C" __attribute__((visibility("default"))) int greta_hip_device_info(int index, GretaHipDeviceInfo* info,
                                                                           char* error, size_t error_size) {
  try {
    const greta::hip::DeviceProps d = greta::hip::query_device(index);
    *info = GretaHipDeviceInfo{};
    info->index = d.index;
    copy_string(info->name, sizeof info->name, d.name);
    copy_string(info->arch, sizeof info->arch, d.arch);
    copy_string(info->platform, sizeof info->platform, d.platform);
    info->wave_size = d.wave_size;
    info->compute_units = d.compute_units;
    info->matrix_cores = d.mma ? 1 : 0;
    info->clock_ghz = d.clock_ghz;
    info->memory_gbps = d.memory_gbps;
    info->peak_fp16_tflops = d.peak_fp16_tflops;
    info->peak_fp32_tflops = d.peak_fp32_tflops;
    info->memory_bytes = d.memory_bytes;
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
    return -1;
  }
}

extern "C" __attribute__((visibility("default"))) greta::engine::Backend* greta_hip_create_backend(
    int index, uint64_t device_memory_limit, int use_graphs, char* error, size_t error_size) {
  try {
    return new greta::hip::HipBackend(greta::hip::HipBackendOptions{
        .device = index, .device_memory_limit = device_memory_limit, .use_graphs = use_graphs != 0});
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
    return nullptr;
  }
}
