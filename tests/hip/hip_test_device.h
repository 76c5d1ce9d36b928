// The HIP device the GPU tests run on, found once per process through the plugin loader: the plugin this build made
// (GRETA_HIP_TEST_PLUGIN) unless GRETA_HIP_PLUGIN or a plugin beside the binary says otherwise. Without a device every
// case prints why and returns (HIP_DEVICE_OR_SKIP); with GRETA_HIP_REQUIRE_DEVICE=1 a missing device fails instead.
#pragma once
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "engine/backend.h"
#include "hip/hip_loader.h"

namespace greta::test {

inline bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

inline std::string executable_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, size_t(n));
  return path.substr(0, path.rfind('/'));
}

struct Device {
  bool present = false;
  std::string why;            // the loader's line when absent
  std::string description;    // plugin and device when present
  bool matrix_cores = false;  // the plugin has matrix-core kernels for it
};

inline const Device& device() {
  static const Device d = [] {
    Device r;
    const std::string dir = executable_dir();
    const char* env = std::getenv("GRETA_HIP_PLUGIN");
#ifdef GRETA_HIP_TEST_PLUGIN
    if ((!env || !*env) && !exists(dir + "/libgreta_hip.so") && !exists(dir + "/libgreta_hip_cuda.so"))
      ::setenv("GRETA_HIP_PLUGIN", GRETA_HIP_TEST_PLUGIN, 1);
#endif
    (void)env;
    try {
      const hip::PluginInfo& info = hip::load_plugin();
      const auto devices = hip::list_devices();
      if (devices.empty()) {
        r.why = "the runtime lists no device";
      } else {
        r.present = true;
        r.matrix_cores = devices[0].matrix_cores != 0;
        r.description = cat(info.path, " (", info.targets, ") on ", devices[0].name, " (", devices[0].arch, ")");
      }
    } catch (const std::exception& e) {
      r.why = e.what();
    }
    if (r.present)
      std::printf("HIP backend tests on %s\n", r.description.c_str());
    else
      std::printf("skipped: no HIP device (%s)\n", r.why.c_str());
    std::fflush(stdout);
    return r;
  }();
  return d;
}

inline bool require_device() {
  const Device& d = device();
  if (d.present) return true;
  const char* req = std::getenv("GRETA_HIP_REQUIRE_DEVICE");
  if (req && *req && std::string(req) != "0") FAIL("GRETA_HIP_REQUIRE_DEVICE is set and there is no HIP device: ", d.why);
  return false;
}

#define HIP_DEVICE_OR_SKIP() \
  if (!::greta::test::require_device()) return

// The HIP tests' backends: graph capture off with GRETA_HIP_NO_GRAPHS=1 (hip::graphs_from_environment).
inline std::unique_ptr<engine::Backend> hip_backend(int device = 0, uint64_t device_memory_limit = 0) {
  return hip::create_backend(device, device_memory_limit, hip::graphs_from_environment());
}

}  // namespace greta::test
