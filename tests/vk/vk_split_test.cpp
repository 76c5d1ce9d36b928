// Layer splits with Vulkan devices (engine/split_backend.h): the goldens with blocks on the CPU backend (--gpu-layers 1
// and half) and over two logical Vulkan devices of one GPU (--devices 0,0, even and --tensor-split 1,3: a real split
// of the two-block models too, where 3,1 would put both blocks on the first device), the same code
// paths as two GPUs, hand-offs included. Each golden case runs one of the four splits, chosen so that every model
// meets a CPU split and a two-device split (CI's time: the four splits of every case would take four golden runs).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/golden_run.h"
#include "engine/model.h"
#include "engine/placement.h"
#include "engine/split_backend.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "vk/backend/vk_backend.h"

using namespace greta;
using namespace greta::engine;

namespace {

enum class Split { cpu_one_block, cpu_half, two_devices_even, two_devices_1_3 };
constexpr Split kSplits[] = {Split::cpu_one_block, Split::two_devices_even, Split::cpu_half, Split::two_devices_1_3};

const char* split_name(Split s) {
  switch (s) {
    case Split::cpu_one_block: return "--gpu-layers 1";
    case Split::cpu_half: return "--gpu-layers half";
    case Split::two_devices_even: return "--devices 0,0";
    case Split::two_devices_1_3: return "--devices 0,0 --tensor-split 1,3";
  }
  return "?";
}

std::unique_ptr<SplitBackend> make_split(const std::string& path, Split split) {
  const model::GgufFile file = model::GgufFile::open(path);
  const model::ModelConfig config = model::ModelConfig::from_gguf(file);
  const ModelWeights weights = map_weights(file, config);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(vk::create_vk_backend());
  PlacementRequest request;
  if (split == Split::cpu_one_block || split == Split::cpu_half) {
    backends.push_back(std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{.threads = 2}));
    request.cpu_offload = true;
    request.gpu_layers = split == Split::cpu_one_block ? 1 : config.n_layers / 2;
  } else {
    backends.push_back(vk::create_vk_backend());
    request.tensor_split = split == Split::two_devices_even ? std::vector<double>{1, 1} : std::vector<double>{1, 3};
  }
  std::vector<PlacementDevice> devices;
  for (const auto& b : backends) devices.push_back({b->name(), b->memory_capacity()});
  Placement placement = place_layers(config, weights, devices, request);
  return std::make_unique<SplitBackend>(std::move(backends), std::move(placement));
}

}  // namespace

TEST_CASE("vk layer split: every golden passes with blocks on the CPU or on a second logical device") {
  const auto files = test::golden_json_files("vk");
  REQUIRE(files.size() >= test::golden_min(44));
  std::map<std::string, size_t> model_index;
  std::map<Split, size_t> runs;
  for (const std::string& file : files) {
    const test::GoldenCase g = test::load_golden(file);
    const size_t m = model_index.emplace(g.model_path, model_index.size()).first->second;
    const bool second_prompt = g.name.find(".p2") != std::string::npos;
    // Model m's two prompts: splits m and m + 1 of kSplits (a CPU split and a two-device split).
    const Split split = kSplits[(m + (second_prompt ? 1 : 0)) % 4];
    ++runs[split];
    auto backend = make_split(g.model_path, split);
    const std::string where = backend->placement().describe();
    const test::GoldenResult r = test::run_golden(g, std::move(backend));
    MESSAGE(g.name, " (", std::string(split_name(split)), "): worst row NMSE ", r.worst_row_nmse, " (limit ", r.limit, "), greedy ",
            r.greedy_compared, "/", g.greedy_tokens.size(), "; ", where);
    CHECK(r.tokenization_ok);
    CHECK(r.worst_row_nmse <= r.limit);
    CHECK(r.greedy_ok);
  }
  if (!test::golden_filtered())  // with GRETA_GOLDEN_ONLY naming one model, only two of the four splits run
    for (Split s : kSplits) CHECK(runs[s] >= 4);
}

// Concurrent sequences on splits: the paged KV cache of each block lives on that block's device; the step inputs
// (page tables, KV rows) reach every device.
TEST_CASE("vk layer split: golden prompts as concurrent sequences beside six others") {
  std::map<std::string, std::vector<test::GoldenCase>> by_model;
  for (const std::string& file : test::golden_json_files("vk")) {
    test::GoldenCase g = test::load_golden(file);
    const std::string name = std::filesystem::path(g.model_path).filename().string();
    if (name == "stories260K-q8_0.gguf" || name == "synth-gemma3-d128-q8_0.gguf" || name == "synth-qwen3moe-d128-q8_0.gguf")
      by_model[g.model_path].push_back(std::move(g));
  }
  REQUIRE(by_model.size() >= test::golden_min(3));
  size_t i = 0;
  for (const auto& [model, cases] : by_model) {
    const Split split = i++ % 2 ? Split::cpu_half : Split::two_devices_1_3;
    auto backend = make_split(model, split);
    const std::vector<test::GoldenResult> results = test::run_golden_batched(cases, std::move(backend), ElemType::F16);
    for (size_t c = 0; c < cases.size(); ++c) {
      MESSAGE(cases[c].name, " batched (", std::string(split_name(split)), "): worst row NMSE ", results[c].worst_row_nmse);
      CHECK(results[c].tokenization_ok);
      CHECK(results[c].worst_row_nmse <= results[c].limit);
      CHECK(results[c].greedy_ok);
    }
  }
}

// Both kinds of split prefill and decode with the validation layer silent on every Vulkan device (the suite's
// validation run sets GRETA_VK_VALIDATION=1).
TEST_CASE("vk layer split: the validation layer stays silent on every device") {
  const std::string path = test::shared_path("models/stories260K-q4_0.gguf");
  for (Split split : kSplits) {
    CAPTURE(split_name(split));
    auto backend = make_split(path, split);
    SplitBackend* s = backend.get();
    Engine e = Engine::open(path, std::move(backend), EngineOptions{.ctx = 64});
    e.prefill(std::vector<TokenId>{1, 15, 42, 7, 300});
    e.decode(9);
    CHECK(s->crossings().copies >= 2);  // at least one hand-off in each of the two steps
    for (size_t i = 0; i < s->backend_count(); ++i)
      if (s->backend(i).name().rfind("vulkan", 0) == 0) CHECK(vk::validation_messages(s->backend(i)).empty());
  }
}

// A device that cannot hold its part fails at load with one line naming it and the sizes.
TEST_CASE("vk layer split: a device memory limit too small for the blocks is a clear error") {
  const std::string path = test::shared_path("models/stories260K-q8_0.gguf");
  vk::VkBackendOptions options;
  options.device_memory_limit = 64 << 10;
  auto vk = vk::create_vk_backend(options);
  CHECK(vk->memory_capacity() == uint64_t(64 << 10));
  CHECK_THROWS_WITH_AS(Engine::open(path, std::move(vk)), doctest::Contains("64.00 KiB"), Error);
}
