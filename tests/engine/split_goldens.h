// The goldens over layer splits, for any GPU backend (tests/vk/vk_split_test.cpp, tests/hip/hip_split_test.cpp): blocks
// on the CPU backend (--gpu-layers 1 and half) and over two logical devices of one GPU (--devices 0,0, even and
// --tensor-split 1,3: a real split of the two-block models too, where 3,1 would put both blocks on the first device),
// the same code paths as two GPUs, hand-offs included. Each golden case runs one of the four splits, chosen so that
// every model meets a CPU split and a two-device split (CI's time: the four splits of every case would take four
// golden runs). On a machine with two GPUs, check_goldens_over_two_gpus runs every case over both GPUs, even and 1:3.
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/golden_run.h"
#include "engine/model.h"
#include "engine/placement.h"
#include "engine/split_backend.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace greta::test {

enum class Split { cpu_one_block, cpu_half, two_devices_even, two_devices_1_3 };
inline constexpr Split kSplits[] = {Split::cpu_one_block, Split::two_devices_even, Split::cpu_half,
                                   Split::two_devices_1_3};

inline const char* split_name(Split s) {
  switch (s) {
    case Split::cpu_one_block: return "--gpu-layers 1";
    case Split::cpu_half: return "--gpu-layers half";
    case Split::two_devices_even: return "two devices, even";  // --devices 0,0 (logical) or 0,1 (two GPUs)
    case Split::two_devices_1_3: return "two devices, --tensor-split 1,3";
  }
  return "?";
}

// A new backend on the GPU for logical device 0 or 1 of a split (each call: a backend of its own; device 1 is
// another logical device than device 0).
using GpuFactory = std::function<std::unique_ptr<engine::Backend>(int device)>;

inline std::unique_ptr<engine::SplitBackend> make_split(const std::string& path, Split split, const GpuFactory& gpu) {
  const model::GgufFile file = model::GgufFile::open(path);
  const model::ModelConfig config = model::ModelConfig::from_gguf(file);
  const engine::ModelWeights weights = engine::map_weights(file, config);
  std::vector<std::unique_ptr<engine::Backend>> backends;
  backends.push_back(gpu(0));
  engine::PlacementRequest request;
  if (split == Split::cpu_one_block || split == Split::cpu_half) {
    backends.push_back(std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{.threads = 2}));
    request.cpu_offload = true;
    request.gpu_layers = split == Split::cpu_one_block ? 1 : config.n_layers / 2;
  } else {
    backends.push_back(gpu(1));
    request.tensor_split = split == Split::two_devices_even ? std::vector<double>{1, 1} : std::vector<double>{1, 3};
  }
  std::vector<engine::PlacementDevice> devices;
  for (const auto& b : backends) devices.push_back({b->name(), b->memory_capacity()});
  engine::Placement placement = engine::place_layers(config, weights, devices, request);
  return std::make_unique<engine::SplitBackend>(std::move(backends), std::move(placement));
}

// One golden case over `split`, checked against the backend's tolerances.
inline void check_golden_on_split(const GoldenCase& g, Split split, const GpuFactory& gpu) {
  auto backend = make_split(g.model_path, split, gpu);
  const std::string where = backend->placement().describe();
  const GoldenResult r = run_golden(g, std::move(backend));
  MESSAGE(g.name, " (", std::string(split_name(split)), "): worst row NMSE ", r.worst_row_nmse, " (limit ", r.limit,
          "), greedy ", r.greedy_compared, "/", g.greedy_tokens.size(), "; ", where);
  CHECK(r.tokenization_ok);
  CHECK(r.worst_row_nmse <= r.limit);
  CHECK(r.greedy_ok);
}

// Every golden case of `backend_name` ("vk", "hip": its tolerances) over one of the four splits.
inline void check_goldens_over_splits(const char* backend_name, const GpuFactory& gpu) {
  const auto files = golden_json_files(backend_name);
  REQUIRE(files.size() >= golden_min(44));
  std::map<std::string, size_t> model_index;
  std::map<Split, size_t> runs;
  for (const std::string& file : files) {
    const GoldenCase g = load_golden(file);
    const size_t m = model_index.emplace(g.model_path, model_index.size()).first->second;
    const bool second_prompt = g.name.find(".p2") != std::string::npos;
    // Model m's two prompts: splits m and m + 1 of kSplits (a CPU split and a two-device split).
    const Split split = kSplits[(m + (second_prompt ? 1 : 0)) % 4];
    ++runs[split];
    check_golden_on_split(g, split, gpu);
  }
  if (!golden_filtered())  // with GRETA_GOLDEN_ONLY naming one model, only two of the four splits run
    for (Split s : kSplits) CHECK(runs[s] >= 4);
}

// Concurrent sequences on splits: the paged KV cache of each block lives on that block's device; the step inputs
// (page tables, KV rows) reach every device. Three models (a dense llama, gemma3's sliding window, qwen3moe's experts).
// `splits`: the split of the first, second, third... model in turn (default: a two-device split, then a CPU one).
inline void check_batched_goldens_over_splits(const char* backend_name, const GpuFactory& gpu,
                                              const std::vector<Split>& splits = {Split::two_devices_1_3,
                                                                                  Split::cpu_half}) {
  std::map<std::string, std::vector<GoldenCase>> by_model;
  for (const std::string& file : golden_json_files(backend_name)) {
    GoldenCase g = load_golden(file);
    const std::string name = std::filesystem::path(g.model_path).filename().string();
    if (name == "stories260K-q8_0.gguf" || name == "synth-gemma3-d128-q8_0.gguf" || name == "synth-qwen3moe-d128-q8_0.gguf")
      by_model[g.model_path].push_back(std::move(g));
  }
  REQUIRE(by_model.size() >= golden_min(3));
  size_t i = 0;
  for (const auto& [model, cases] : by_model) {
    const Split split = splits[i++ % splits.size()];
    const std::vector<GoldenResult> results =
        run_golden_batched(cases, make_split(model, split, gpu), engine::ElemType::F16);
    for (size_t c = 0; c < cases.size(); ++c) {
      MESSAGE(cases[c].name, " batched (", std::string(split_name(split)), "): worst row NMSE ",
              results[c].worst_row_nmse);
      CHECK(results[c].tokenization_ok);
      CHECK(results[c].worst_row_nmse <= results[c].limit);
      CHECK(results[c].greedy_ok);
    }
  }
}

// A prompt of many passes (max_batch 16: 150 tokens are 10 passes) over two devices runs pipelined
// (split_backend.h: the first device takes pass k + 1 while the second runs pass k); its logits and the decode steps
// after it match one device alone. An ordering fault (a hand-off overwritten before it was read, a pass overtaking
// the one before it) would give unrelated logits, far past the limit.
inline void check_pipelined_passes(const GpuFactory& gpu) {
  const std::string path = shared_path("models/stories260K.gguf");
  const engine::EngineOptions options{.ctx = 256, .max_batch = 16, .max_seqs = 4};
  auto split = make_split(path, Split::two_devices_even, gpu);
  engine::SplitBackend* s = split.get();
  engine::Engine spread = engine::Engine::open(path, std::move(split), options);
  engine::Engine one = engine::Engine::open(path, gpu(0), options);
  std::vector<engine::TokenId> prompt(150);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = engine::TokenId(1 + (i * 7919 + 13) % 511);
  const auto nmse = [](std::span<const float> got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    return test::nmse(got.data(), want.data(), want.size());
  };
  const auto expected = one.prefill(prompt);
  std::vector<float> want(expected.begin(), expected.end());
  const double prefill_nmse = nmse(spread.prefill(prompt), want);
  MESSAGE("pipelined prefill of ", prompt.size(), " tokens: NMSE ", prefill_nmse, " against one device; ",
          s->placement().describe());
  CHECK(prefill_nmse <= 1e-6);
  CHECK(s->crossings().copies >= 10);
  for (engine::TokenId t : {engine::TokenId(42), engine::TokenId(7), engine::TokenId(300)}) {
    const auto a = one.decode(t);
    want.assign(a.begin(), a.end());
    CHECK(nmse(spread.decode(t), want) <= 1e-6);
  }
}

// Two real GPUs: true when `gpus` (how many the machine has) is at least 2. Otherwise the case says it did not run and
// returns false, or fails where GRETA_REQUIRE_TWO_GPUS=1 says two must be there (the two-GPU machine's runs).
inline bool two_gpus_or_skip(size_t gpus) {
  if (gpus >= 2) return true;
  const char* required = std::getenv("GRETA_REQUIRE_TWO_GPUS");
  if (required && *required && std::string(required) != "0")
    FAIL("GRETA_REQUIRE_TWO_GPUS is set and this machine has ", gpus, " GPU(s)");
  MESSAGE("skipped: ", gpus, " GPU(s) here; the two-GPU cases need two (--devices 0,1)");
  return false;
}

// Every golden case over two GPUs (`gpu(0)` and `gpu(1)` on different physical devices), both splits: even (half
// the blocks each) and --tensor-split 1,3; then the golden prompts as concurrent sequences on both splits.
inline void check_goldens_over_two_gpus(const char* backend_name, const GpuFactory& gpu) {
  const auto files = golden_json_files(backend_name);
  REQUIRE(files.size() >= golden_min(44));
  for (const std::string& file : files) {
    const GoldenCase g = load_golden(file);
    for (Split split : {Split::two_devices_even, Split::two_devices_1_3}) check_golden_on_split(g, split, gpu);
  }
  check_batched_goldens_over_splits(backend_name, gpu, {Split::two_devices_even, Split::two_devices_1_3});
  check_pipelined_passes(gpu);
}

}  // namespace greta::test
