#include "backend_factory.h"

#include <fstream>
#include <string_view>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "hip/hip_loader.h"
#include "vk/backend/vk_backend.h"

namespace greta::cli {

namespace {

// Thread counts above this are certainly a typo (and would make the pool allocate absurd numbers of threads).
constexpr int64_t kMaxThreads = 1024;

// The CPU's marketing name from /proc/cpuinfo ("model name" on x86, "Model" / "Hardware" on some ARM boards).
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string_view key = std::string_view(line).substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
    if (key != "model name" && key != "Model" && key != "Hardware") continue;
    std::string_view value = std::string_view(line).substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (!value.empty()) return std::string(value);
  }
  return "CPU";
}

BackendChoice make_cpu(const BackendRequest& request) {
  if (request.device >= 0)
    fail("--device ", request.device, ": the cpu backend has no devices to choose from (--device selects a GPU)");
  cpu::CpuOptions options;
  options.threads = int(request.threads);
  BackendChoice choice;
  choice.backend = std::make_unique<cpu::CpuBackend>(options);
  choice.kind = "cpu";
  choice.device = cpu_model_name();
  return choice;
}

// The HIP backend lives in a plugin loaded at run time (src/hip/hip_loader.h): every failure (no plugin, no HIP
// runtime, no device) is one line from the loader.
BackendChoice make_hip(const BackendRequest& request) {
  BackendChoice choice;
  choice.backend = hip::create_backend(int(request.device));
  const auto devices = hip::list_devices();
  const size_t index = request.device < 0 ? 0 : size_t(request.device);
  choice.device = index < devices.size() ? devices[index].name : "HIP device";
  return choice;
}

bool always() { return true; }

BackendChoice make_vk(const BackendRequest& request) {
  vk::VkBackendOptions options;
  options.device = int(request.device);
  BackendChoice choice;
  choice.backend = vk::create_vk_backend(options);
  const std::string name = choice.backend->name();  // "vulkan: <device>"
  choice.device = name.substr(name.find(": ") == std::string::npos ? 0 : name.find(": ") + 2);
  return choice;
}

// Every backend --backend can name, in the order the default is looked for. A backend this binary does not have
// keeps create == nullptr; adding one is one line: its create function (and, for a GPU backend, whether a device
// exists). For example, once src/vk exposes it:
//   {"vk", "the Vulkan backend", true, make_vk /* vk::create_backend(request.device, ...) */, vk_device_exists},
struct BackendEntry {
  const char* name;
  const char* what;                                    // for messages: "the Vulkan backend"
  bool default_candidate;                              // may be picked when --backend is not given
  BackendChoice (*create)(const BackendRequest&);      // nullptr: not built into this binary
  bool (*has_device)();                                // only asked when picking the default
};

constexpr BackendEntry k_backends[] = {
    {"vk", "the Vulkan backend", true, make_vk, [] { return vk::vulkan_gpu_available(); }},
    {"hip", "the HIP backend", false, make_hip, nullptr},
    {"cpu", "the CPU reference backend", true, make_cpu, always},
};

const BackendEntry* find_backend(std::string_view name) {
  for (const auto& b : k_backends)
    if (name == b.name) return &b;
  return nullptr;
}

constexpr OptionSpec k_backend_options[] = {
    {"backend", nullptr, true,
     "cpu | vk | hip (default: vk when a Vulkan GPU exists, else cpu; a CPU Vulkan device like lavapipe needs "
     "--backend vk)"},
    {"device", nullptr, true, "GPU index as `greta-vk devices` lists them (vk, hip)"},
    {"threads", "t", true, "CPU threads (cpu backend; default 0: one per hardware thread)"},
};

}  // namespace

std::string backend_names() {
  std::string names;
  for (const auto& b : k_backends) names += cat(names.empty() ? "" : ", ", b.name);
  return names;
}

BackendChoice create_backend(const BackendRequest& request) {
  if (request.threads < 0 || request.threads > kMaxThreads)
    fail("--threads ", request.threads, ": must be between 1 and ", kMaxThreads, " (0: one per hardware thread)");
  if (request.device < -1) fail("--device ", request.device, ": device indices start at 0");

  if (!request.name.empty()) {
    const BackendEntry* entry = find_backend(request.name);
    if (!entry) fail("--backend ", request.name, ": unknown backend (choose one of ", backend_names(), ")");
    if (!entry->create) fail("--backend ", request.name, ": ", entry->what, " is not built into this binary yet");
    BackendChoice choice = entry->create(request);
    choice.kind = entry->name;
    return choice;
  }
  for (const auto& b : k_backends) {
    if (!b.default_candidate || !b.create || !b.has_device || !b.has_device()) continue;
    BackendChoice choice = b.create(request);
    choice.kind = b.name;
    choice.by_default = true;
    if (choice.kind == "cpu") {  // say why a Vulkan device present was passed over
      std::string cpu_vulkan;
      vk::vulkan_gpu_available(&cpu_vulkan);
      if (!cpu_vulkan.empty())
        choice.default_note = cat("the only Vulkan device, ", cpu_vulkan, ", is a CPU implementation; --backend vk uses it");
    }
    return choice;
  }
  fail("no backend available");  // unreachable while cpu is built in
}

std::span<const OptionSpec> backend_option_specs() { return k_backend_options; }

BackendRequest backend_request_from(const Args& args) {
  BackendRequest request;
  request.name = args.get("backend");
  if (args.has("backend") && request.name.empty())
    fail("--backend needs a name (one of ", backend_names(), ")");
  request.device = args.get_int("device", -1);
  if (args.has("device") && request.device < 0) fail("--device ", request.device, ": device indices start at 0");
  request.threads = args.get_int("threads", 0);  // 0: one per hardware thread, as the help says
  if (request.threads < 0 || request.threads > kMaxThreads)
    fail("--threads ", request.threads, ": must be between 1 and ", kMaxThreads, " (0: one per hardware thread)");
  return request;
}

std::string describe_backend(const BackendChoice& choice) {
  // The Vulkan backend's name already holds its device ("vulkan: NVIDIA H200"): the device once.
  const std::string name = choice.backend->name();
  return cat("backend: ", name, name.find(choice.device) == std::string::npos ? " on " + choice.device : "",
             choice.by_default ? (choice.default_note.empty() ? " (default)" : cat(" (default: ", choice.default_note, ")"))
                               : "");
}

}  // namespace greta::cli
