#include "backend_factory.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
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
  // GRETA_HIP_NO_GRAPHS for measurements only, as the Vulkan backend's experiment switches.
  const bool graphs = !request.experiment_switches || hip::graphs_from_environment();
  choice.backend = hip::create_backend(int(request.device), request.device_memory_limit, graphs);
  const auto devices = hip::list_devices();
  const size_t index = request.device < 0 ? 0 : size_t(request.device);
  choice.device = index < devices.size() ? devices[index].name : "HIP device";
  return choice;
}

bool always() { return true; }

BackendChoice make_vk(const BackendRequest& request) {
  vk::VkBackendOptions options;
  options.device = int(request.device);
  options.device_memory_limit = request.device_memory_limit;
  if (request.experiment_switches) options.switches = vk::ExperimentSwitches::from_environment();
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
    {"threads", "t", true, "CPU threads (cpu backend, and the CPU's blocks with --gpu-layers; default 0: one per "
                           "hardware thread)"},
    {"gpu-layers", "ngl", true, "N | all | auto: blocks on the GPU(s), the rest on the CPU (default auto: as many as fit)"},
    {"devices", nullptr, true, "LIST: split the blocks over these GPUs, e.g. 0,1 (0,0: two logical devices on one)"},
    {"split-mode", nullptr, true, "none | layer: one GPU, or consecutive blocks on each of --devices (default: layer "
                                  "when --devices names several)"},
    {"tensor-split", nullptr, true, "LIST: shares of the blocks per GPU of --devices, e.g. 3,1 (default: by memory)"},
    {"device-memory-limit", nullptr, true, "SIZE: use at most this much memory on each GPU, e.g. 2G (testing)"},
};

// "0,1" -> {0, 1}.
std::vector<int64_t> parse_indices(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : comma_items(text)) {
    const std::optional<int64_t> v = parse_integer(item, 0, 1024);
    if (!v) fail("--", option, " ", text, ": '", item, "' is not a device index");
    out.push_back(*v);
  }
  return out;
}

// "3,1" -> {3, 1}.
std::vector<double> parse_shares(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : comma_items(text)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
      fail("--tensor-split ", text, ": '", item, "' is not a share (a number of 0 or more)");
    out.push_back(v);
  }
  return out;
}

}  // namespace

uint64_t parse_byte_size(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit(end ? end : "");
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && (unit.substr(1) == "b" || unit.substr(1) == "ib")) unit.resize(1);
  const std::string units = "bkmgt";
  const size_t power = unit.empty() ? 0 : units.find(unit);
  if (end == text.c_str() || !std::isfinite(v) || v <= 0 || unit.size() > 1 || power == std::string::npos)
    fail("--", option, " ", text, ": expected a size such as 512M, 2G or 1073741824");
  const double bytes = v * std::pow(1024.0, double(power));
  if (bytes > double(uint64_t(1) << 60)) fail("--", option, " ", text, ": too large");
  return uint64_t(bytes);
}

namespace {

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
  if (args.has("gpu-layers")) {
    const std::string v = args.get("gpu-layers");
    if (v == "all") request.gpu_layers = kAllLayers;
    else if (v != "auto") {
      request.gpu_layers = args.get_int("gpu-layers", 0);
      if (*request.gpu_layers < 0) fail("--gpu-layers ", v, ": expected a number of blocks, all or auto");
    }
  }
  if (args.has("devices")) {
    if (args.has("device")) fail("--devices and --device: give one of them");
    request.devices = parse_indices("devices", args.get("devices"));
  }
  const std::string mode = args.get("split-mode", request.devices.size() > 1 ? "layer" : "none");
  if (mode != "none" && mode != "layer") fail("--split-mode ", mode, ": expected none or layer");
  if (mode == "none" && request.devices.size() > 1)
    fail("--split-mode none runs on one GPU; --devices names ", request.devices.size());
  if (mode == "layer" && request.devices.empty()) fail("--split-mode layer: name the GPUs with --devices, e.g. 0,1");
  if (args.has("tensor-split")) {
    request.tensor_split = parse_shares(args.get("tensor-split"));
    if (request.tensor_split.size() != std::max<size_t>(request.devices.size(), 1))
      fail("--tensor-split has ", request.tensor_split.size(), " shares for ", std::max<size_t>(request.devices.size(), 1),
           " GPU(s) (--devices)");
  }
  if (args.has("device-memory-limit"))
    request.device_memory_limit = parse_byte_size("device-memory-limit", args.get("device-memory-limit"));
  return request;
}

BackendChoice create_model_backend(const BackendRequest& request, const model::ModelConfig& config,
                                   const engine::ModelWeights& weights, const engine::EngineOptions& options) {
  BackendRequest first = request;
  if (!request.devices.empty()) first.device = request.devices.front();
  BackendChoice choice = create_backend(first);
  if (choice.kind == "cpu") {
    if (request.spreads() || request.device_memory_limit > 0)
      fail("--gpu-layers, --devices, --tensor-split and --device-memory-limit need a GPU backend (--backend vk or hip)");
    return choice;
  }
  std::vector<std::unique_ptr<engine::Backend>> backends;
  backends.push_back(std::move(choice.backend));
  for (size_t i = 1; i < request.devices.size(); ++i) {
    BackendRequest next = request;
    next.name = choice.kind;
    next.device = request.devices[i];
    backends.push_back(create_backend(next).backend);
  }
  std::unique_ptr<engine::Backend> cpu = make_cpu(BackendRequest{.threads = request.threads}).backend;

  engine::PlacementRequest place;
  place.tensor_split = request.tensor_split;
  place.ctx = options.ctx > 0 ? options.ctx : engine::Engine::default_context(config);
  place.kv_type = options.kv_type;
  place.max_batch = options.max_batch;
  if (request.gpu_layers) place.gpu_layers = std::min(*request.gpu_layers, config.n_layers);
  const auto devices = [&](bool with_cpu) {
    std::vector<engine::PlacementDevice> out;
    for (const auto& b : backends) out.push_back({b->name(), b->memory_capacity()});
    if (with_cpu) out.push_back({cpu->name(), cpu->memory_capacity()});
    return out;
  };
  place.cpu_offload = place.gpu_layers != config.n_layers;
  engine::Placement placement = place_layers(config, weights, devices(place.cpu_offload), place);
  if (place.cpu_offload && placement.layers.back() == 0) {  // everything fits the GPUs: leave the CPU out
    place.cpu_offload = false;
    place.gpu_layers = -1;
    placement = place_layers(config, weights, devices(false), place);
  }
  choice.placement = placement.describe();
  if (place.cpu_offload && placement.layers.back() == config.n_layers) {  // --gpu-layers 0: the CPU alone
    choice.backend = std::move(cpu);
    choice.kind = "cpu";
    choice.device = cpu_model_name();
    return choice;
  }
  if (place.cpu_offload) backends.push_back(std::move(cpu));
  if (backends.size() == 1) {
    choice.placement.clear();
    choice.backend = std::move(backends.front());
    return choice;
  }
  auto split = std::make_unique<engine::SplitBackend>(std::move(backends), std::move(placement));
  choice.split = split.get();
  choice.backend = std::move(split);
  return choice;
}

std::string describe_backend(const BackendChoice& choice) {
  // The Vulkan backend's name already holds its device ("vulkan: NVIDIA H200"): the device once.
  const std::string name = choice.backend->name();
  return cat("backend: ", name, name.find(choice.device) == std::string::npos ? " on " + choice.device : "",
             choice.by_default ? (choice.default_note.empty() ? " (default)" : cat(" (default: ", choice.default_note, ")"))
                               : "");
}

}  // namespace greta::cli
