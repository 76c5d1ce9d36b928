// Loading onto unified memory (lavapipe here; integrated GPUs): the device's memory is the process's, so the model
// must not be held twice. Where the driver imports host memory (VK_EXT_external_memory_host, as lavapipe does), the
// matrices are the mapped file's own pages, used in place; otherwise each is copied straight into mapped device
// memory and the file's pages are given back.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "test_util.h"
#include "vk/backend/vk_backend.h"
#include "vk/context.h"

using namespace greta;
using namespace greta::engine;

namespace {

// Rss of the file's mapping in this process, from /proc/self/smaps; -1 when the file is not mapped.
int64_t resident_kib(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_file = false;
  int64_t kib = -1;
  while (std::getline(smaps, line)) {
    if (line.find('-') != std::string::npos && line.find(' ') != std::string::npos && line[0] != ' ' &&
        !std::isupper(static_cast<unsigned char>(line[0])))
      in_file = line.find(std::filesystem::path(path).filename().string()) != std::string::npos;
    else if (in_file && line.rfind("Rss:", 0) == 0)
      kib = std::max<int64_t>(kib, 0) + std::stoll(line.substr(4));
  }
  return kib;
}

bool device_imports_host_memory() {
  auto context = vk::Context::create();
  return context->info().imports_host_memory();
}

// Greedy tokens and the last logits of a prompt and a few decode steps.
struct Run {
  std::vector<TokenId> tokens;
  std::vector<float> logits;
};
Run greedy(Engine& e, int steps) {
  const std::vector<TokenId> prompt = {1, 15, 42, 7, 99, 3};
  std::span<const float> logits = e.prefill(prompt);
  Run r;
  for (int i = 0; i < steps; ++i) {
    r.tokens.push_back(argmax(logits));
    logits = e.decode(r.tokens.back());
  }
  r.logits.assign(logits.begin(), logits.end());
  return r;
}

}  // namespace

// After the load the file's mapping keeps only a small part of the file resident (the header and the norm vectors,
// read as floats).
TEST_CASE("vk load on unified memory: copied weights give the file's pages back") {
  const std::string path = test::shared_path("models/synth-llama-d256-f32.gguf");
  vk::VkBackendOptions options;
  options.import_host_weights = false;
  Engine e = Engine::open(path, vk::create_vk_backend(options), EngineOptions{.ctx = 64});
  CHECK(e.backend().weights_note().empty());
  const int64_t file_kib = int64_t(std::filesystem::file_size(path) / 1024);
  const int64_t kib = resident_kib(path);
  MESSAGE("file ", file_kib, " KiB, resident after the load ", kib, " KiB");
  REQUIRE(kib >= 0);  // the mapping is there
  CHECK(kib < file_kib / 4);
  // The weights are still right: a greedy step matches the CPU backend's.
  Engine cpu = Engine::open(path, std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{.threads = 2}), EngineOptions{.ctx = 64});
  const std::vector<TokenId> prompt = {1, 15, 42, 7};
  CHECK(argmax(e.prefill(prompt)) == argmax(cpu.prefill(prompt)));
}

// The kernels read the same bytes either way, so imported and copied weights give identical logits. The models
// cover K-quants, a tied output matrix, phi3's fused QKV and gate/up (row slices of one tensor: starts inside it),
// gpt-oss's MXFP4 experts (3-D) and a sliding window.
TEST_CASE("vk load on unified memory: weights used in place give the copied weights' logits exactly") {
  if (!device_imports_host_memory()) {
    MESSAGE("the default Vulkan device does not import host memory: not run");
    return;
  }
  for (const std::string name : {"models/synth-llama-d256-q4_k_m.gguf", "models/synth-llama-tied-d256-q8_0.gguf",
                           "next/models/synth-phi3-d256-q4_k_m.gguf", "next/models/synth-gptoss-d128-mxfp4.gguf",
                           "next/models/synth-gemma3-d128-q8_0.gguf"}) {
    CAPTURE(name);
    const std::string path = test::shared_path(name);
    Engine in_place = Engine::open(path, vk::create_vk_backend(), EngineOptions{.ctx = 64});
    const std::string note = in_place.backend().weights_note();
    MESSAGE(name, ": ", note);
    CHECK(note.find("used in place from the mapped file") != std::string::npos);
    vk::VkBackendOptions copy_options;
    copy_options.import_host_weights = false;
    Engine copied = Engine::open(path, vk::create_vk_backend(copy_options), EngineOptions{.ctx = 64});
    CHECK(copied.backend().weights_note().empty());
    const Run a = greedy(in_place, 5), b = greedy(copied, 5);
    CHECK(a.tokens == b.tokens);
    CHECK(a.logits == b.logits);
  }
}
