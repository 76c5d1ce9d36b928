// Loads the HIP plugin at run time (see hip_loader.h).
#include "hip/hip_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <sys/stat.h>

#include "core/error.h"

namespace greta::hip {

namespace {

constexpr size_t kErrorBytes = 512;

struct Plugin {
  PluginInfo info;
  GretaHipPluginTargetsFn targets = nullptr;
  GretaHipDeviceCountFn device_count = nullptr;
  GretaHipDeviceInfoFn device_info = nullptr;
  GretaHipCreateBackendFn create_backend = nullptr;
};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string executable_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, size_t(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string last_dlerror() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

// The HIP runtime, loaded RTLD_GLOBAL so the AMD plugin's undefined hip* symbols resolve against it. Returns the name
// that loaded, or throws one line naming every place looked in.
std::string load_hip_runtime() {
  std::vector<std::string> names = {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
  if (const char* rocm = std::getenv("ROCM_PATH"); rocm && *rocm) names.push_back(cat(rocm, "/lib/libamdhip64.so"));
  names.push_back("/opt/rocm/lib/libamdhip64.so");
  std::string tried, first_error;
  for (const auto& n : names) {
    if (::dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL)) return n;
    const std::string e = last_dlerror();
    // A library that exists but does not load (wrong architecture, missing dependency) is worth reporting as such.
    if (first_error.empty() && e.find("No such file") == std::string::npos) first_error = e;
    tried += cat(tried.empty() ? "" : ", ", n);
  }
  if (!first_error.empty()) fail("hip: the HIP runtime library does not load: ", first_error);
  fail("hip: the HIP runtime library (libamdhip64.so) is not installed (looked for ", tried,
       "): install ROCm to use --backend hip");
}

template <class Fn>
Fn symbol(void* handle, const std::string& path, const char* name) {
  void* p = ::dlsym(handle, name);
  if (!p) fail("hip: ", path, " is not a GRETA HIP plugin (no ", name, ")");
  return reinterpret_cast<Fn>(p);
}

Plugin open_plugin(const std::string& path, bool needs_hip_runtime) {
  Plugin plugin;
  plugin.info.path = path;
  if (needs_hip_runtime) plugin.info.runtime = load_hip_runtime();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) fail("hip: cannot load ", path, ": ", last_dlerror());
  // Never closed: backends created by the plugin live in its code until the process ends.
  const auto abi = symbol<GretaHipPluginAbiFn>(handle, path, "greta_hip_plugin_abi");
  if (abi() != kGretaHipPluginAbi)
    fail("hip: ", path, " was built for plugin interface ", abi(), ", this greta-vk expects ", kGretaHipPluginAbi,
         " (rebuild both from the same tree)");
  plugin.targets = symbol<GretaHipPluginTargetsFn>(handle, path, "greta_hip_plugin_targets");
  plugin.device_count = symbol<GretaHipDeviceCountFn>(handle, path, "greta_hip_device_count");
  plugin.device_info = symbol<GretaHipDeviceInfoFn>(handle, path, "greta_hip_device_info");
  plugin.create_backend = symbol<GretaHipCreateBackendFn>(handle, path, "greta_hip_create_backend");
  plugin.info.targets = plugin.targets();
  return plugin;
}

Plugin find_and_open() {
  if (const char* p = std::getenv("GRETA_HIP_PLUGIN"); p && *p) {
    const std::string path = p;
    if (!file_exists(path)) fail("hip: GRETA_HIP_PLUGIN=", path, ": no such file");
    return open_plugin(path, path.find("_cuda") == std::string::npos);
  }
  const std::string dir = executable_dir();
  const std::string amd = dir + "/libgreta_hip.so", nvidia = dir + "/libgreta_hip_cuda.so";
  const bool have_amd = file_exists(amd), have_nvidia = file_exists(nvidia);
  if (!have_amd && !have_nvidia)
    fail("hip: the HIP backend is not built into this binary (no libgreta_hip.so next to the executable in ", dir,
         "; install the HIP toolchain with scripts/setup_hip.sh and rebuild)");
  std::string amd_error;
  if (have_amd) {
    try {
      return open_plugin(amd, true);
    } catch (const Error& e) {
      if (!have_nvidia) throw;
      amd_error = e.what();
    }
  }
  try {
    return open_plugin(nvidia, false);
  } catch (const Error& e) {
    if (amd_error.empty()) throw;
    fail(amd_error, "; and ", e.what());
  }
}

const Plugin& plugin() {
  struct State {
    Plugin plugin;
    std::string error;
  };
  static const State state = [] {
    State s;
    try {
      s.plugin = find_and_open();
    } catch (const Error& e) {
      s.error = e.what();
    }
    return s;
  }();
  if (!state.error.empty()) throw Error(state.error);
  return state.plugin;
}

int device_count(const Plugin& p) {
  char error[kErrorBytes] = {};
  const int n = p.device_count(error, sizeof error);
  if (n < 0) fail("hip: no HIP device: the runtime (", p.info.runtime.empty() ? "CUDA" : p.info.runtime, ") reports \"",
                  error, "\"");
  return n;
}

}  // namespace

const PluginInfo& load_plugin() { return plugin().info; }

std::vector<GretaHipDeviceInfo> list_devices() {
  const Plugin& p = plugin();
  const int n = device_count(p);
  std::vector<GretaHipDeviceInfo> devices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    char error[kErrorBytes] = {};
    if (p.device_info(i, &devices[size_t(i)], error, sizeof error) != 0) fail("hip: device ", i, ": ", error);
  }
  return devices;
}

std::unique_ptr<engine::Backend> create_backend(int index, uint64_t device_memory_limit, bool use_graphs) {
  const Plugin& p = plugin();
  const int n = device_count(p);
  if (n == 0) fail("hip: no HIP device found (the runtime ", p.info.runtime, " loaded but lists no GPU)");
  const int i = index < 0 ? 0 : index;
  if (i >= n) fail("hip: device index ", i, " is out of range: ", n, " HIP device(s) found");
  char error[kErrorBytes] = {};
  engine::Backend* b = p.create_backend(i, device_memory_limit, use_graphs ? 1 : 0, error, sizeof error);
  if (!b) fail(error[0] ? error : "hip: the plugin could not create a backend");
  return std::unique_ptr<engine::Backend>(b);
}

bool graphs_from_environment() {
  const char* e = std::getenv("GRETA_HIP_NO_GRAPHS");
  return !(e && *e && std::string_view(e) != "0");
}

std::string describe_devices() {
  std::vector<GretaHipDeviceInfo> devices;
  std::string plugin_line;
  try {
    const PluginInfo& info = load_plugin();
    plugin_line = cat(info.path, " (", info.targets, ")");
    devices = list_devices();
  } catch (const Error& e) {
    return cat("HIP: not available: ", e.what(), "\n");
  }
  std::string out = cat(devices.size(), " HIP device(s) via ", plugin_line, "\n");
  for (const auto& d : devices) {
    out += cat("[", d.index, "] ", d.name, " (", d.platform, " ", d.arch, ")\n");
    out += cat("    compute units ", d.compute_units, ", wave", d.wave_size, ", matrix cores ",
               d.matrix_cores ? "yes" : "no (no kernels for this architecture in the plugin)", "\n");
    char line[256];
    std::snprintf(line, sizeof line, "    memory %s, ~%.0f GB/s; clock %.2f GHz; peak ~%.1f TFLOP/s fp16, ~%.1f fp32\n",
                  format_bytes(double(d.memory_bytes)).c_str(), d.memory_gbps, d.clock_ghz, d.peak_fp16_tflops,
                  d.peak_fp32_tflops);
    out += line;
  }
  return out;
}

}  // namespace greta::hip
