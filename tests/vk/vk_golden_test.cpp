// The Vulkan backend end to end: every model and prompt in ../shared/golden meets the same acceptance as the CPU
// reference (tests/engine/golden_test.cpp: tokens, prompt-logit NMSE per weight-type class, greedy continuation),
// and verify mode (engine/verify.h) finds no op that diverges from the CPU.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/model.h"
#include "engine/engine.h"
#include "engine/batch_scenario.h"
#include "engine/golden_run.h"
#include "engine/verify.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "vk/backend/vk_backend.h"
#include "vk_shared_device.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::engine;

namespace {

// The models of ../shared/next that the Vulkan backend runs (test::next_model_supported), as paths; they join the
// verify, concurrent-sequence and batched tests below (MoE routing, sliding windows and sinks, GLU kinds, rope
// scaling: each op against the CPU, and the paged kernels over many sequences).
std::vector<std::string> next_vk_models() {
  std::vector<std::string> paths;
  for (const char* name : {"synth-qwen3moe-d128-q8_0.gguf", "synth-gemma3-d128-q8_0.gguf", "synth-phi3-d256-q4_k_m.gguf",
                           "synth-gptoss-d128-q8_0.gguf", "synth-gptoss-d128-mxfp4.gguf"}) {
    const char* only = std::getenv("GRETA_GOLDEN_ONLY");
    if (only && std::string(name).find(only) == std::string::npos) continue;
    if (test::next_model_supported(name, "vk")) paths.push_back(test::shared_path(std::string("next/models/") + name));
  }
  return paths;
}

}  // namespace

TEST_CASE("vk golden: every model and prompt matches llama.cpp like the CPU reference does") {
  const auto files = test::golden_json_files("vk");
  REQUIRE(files.size() >= test::golden_min(44));
  std::set<std::string> models;
  for (const std::string& file : files) {
    const test::GoldenCase g = test::load_golden(file);
    models.insert(g.model_path);
    const test::GoldenResult r = test::run_golden(g, vk::test::test_backend());
    INFO(g.name, ": worst row NMSE ", r.worst_row_nmse, " (row ", r.worst_row, ", limit ", r.limit, "), overall ",
         r.overall_nmse, ", greedy equal for ", r.greedy_compared, "/", g.greedy_tokens.size(), " steps");
    const std::string summary = greta::cat(g.name, ": worst row NMSE ", r.worst_row_nmse, " (limit ", r.limit,
                                           "), greedy ", r.greedy_compared, "/", g.greedy_tokens.size());
    MESSAGE(summary);
    CHECK(r.tokenization_ok);
    CHECK(r.worst_row_nmse <= r.limit);
    CHECK(r.greedy_ok);
  }
  CHECK(models.size() >= test::golden_min(22));
}

TEST_CASE("vk verify: no op diverges from the CPU reference on the shared models") {
  std::vector<std::string> paths;
  for (const char* name : {"stories260K.gguf", "synth-llama-d256-q4_k_m.gguf", "synth-qwen2-d256-q8_0.gguf",
                           "synth-qwen3-d256-q4_k_m.gguf", "synth-llama-tied-d256-q8_0.gguf"})
    paths.push_back(test::shared_path(std::string("models/") + name));
  for (const std::string& path : next_vk_models()) paths.push_back(path);
  for (const std::string& path : paths) {
    const std::string model_name = std::filesystem::path(path).filename().string();
    CAPTURE(model_name);
    auto file = model::GgufFile::open(path);
    const auto config = model::ModelConfig::from_gguf(file);
    const auto weights = map_weights(file, config);
    // f32 activations in the decode matvecs: int8 ones (the default where integer dot products are accelerated)
    // round each op's input (NMSE ~1e-5, held to its exact bound by vk_ops_test.cpp) and would hide the 1e-7 check
    // below for every other op.
    vk::VkBackendOptions options;
    options.q8_activations = false;
    auto vk = vk::test::test_backend(options);
    cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
    const std::vector<TokenId> tokens = {1, 15, 42, 7, 300, 99, 5, 250, 11, 3};
    // f32 kernels differ from the CPU only in summation order (~1e-13); cooperative-matrix matmuls round their
    // operands to f16 (~1e-6 per op, as in vk_ops_test.cpp).
    const double limit = vk::uses_cooperative_matrix(*vk) ? 2e-6 : 1e-7;
    CHECK(!vk::uses_int8_activations(*vk));
    const VerifyReport report = verify(config, weights, *vk, cpu, tokens, VerifyOptions{.max_nmse = limit});
    const std::string line = model_name + ": " + report.summary();
    MESSAGE(line);
    CHECK(report.ok());
    CHECK(vk::validation_messages(*vk).empty());
  }
}

// The goldens as concurrent sequences beside six others (tests/engine/golden_run.h), f32, f16 and q8_0 KV caches (f16
// on every model, the other two on alternate ones), on
// one model per architecture and weight class (every model runs on the CPU backend; here the kernels' paged paths are
// what is new, and lavapipe's time is CI's), and every next/ model the backend runs.
TEST_CASE("vk golden: both prompts as concurrent sequences beside six others, f32, f16 and q8_0 KV") {
  const std::set<std::string> models = {"stories260K.gguf", "stories260K-q4_0.gguf", "synth-llama-d256-q4_k_m.gguf",
                                        "synth-qwen2-d256-q8_0.gguf", "synth-qwen3-d256-q4_k_m.gguf",
                                        "synth-llama-tied-d256-q8_0.gguf"};
  std::map<std::string, std::vector<test::GoldenCase>> by_model;
  for (const std::string& file : test::golden_json_files("vk")) {
    test::GoldenCase g = test::load_golden(file);
    // golden_json_files("vk") lists only the next/ models this backend runs: all of them join.
    const bool next = std::filesystem::path(g.model_path).parent_path().parent_path().filename() == "next";
    if (next || models.count(std::filesystem::path(g.model_path).filename().string()))
      by_model[g.model_path].push_back(std::move(g));
  }
  REQUIRE(by_model.size() >= test::golden_min(models.size()));
  // Every model with the default f16 cache, the f32 and q8_0 caches on alternate models (each still on several
  // architectures and weight classes): all three on every model made this the suite's slowest case (50 s of
  // lavapipe's Release run, about three times that under ASan).
  // Where the device has f16 cooperative matrices, the f16 cache also runs with the batched decode attention on them
  // forced (attention_decode_coopmat: the backend takes it from 128 head groups, more than these steps have).
  const bool coopmat = vk::uses_cooperative_matrix(*vk::test::test_backend());
  size_t index = 0;
  for (const auto& [model, cases] : by_model) {
    std::vector<ElemType> kv_types;
    for (ElemType kv : test::kv_types_for(model))
      if (kv == ElemType::F16 || (kv == ElemType::F32) == (index % 2 == 0)) kv_types.push_back(kv);
    ++index;
    for (ElemType kv : kv_types)
      for (const char* forced : {static_cast<const char*>(nullptr), "1"}) {
        if (forced && (kv != ElemType::F16 || !coopmat)) continue;
        vk::test::ScopedEnv coopmat_env("GRETA_VK_ATTN_COOPMAT", forced);
        // The f16 cache's runs take int8 activations wherever the device has integer dot products: the default
        // only where they are accelerated, so on lavapipe this is CI's run of the int8 decode path against llama.cpp.
        vk::VkBackendOptions options;
        if (kv == ElemType::F16) options.q8_activations = true;
        auto backend = vk::test::test_backend(options);
        const std::vector<test::GoldenResult> results = test::run_golden_batched(cases, std::move(backend), kv);
        for (size_t i = 0; i < cases.size(); ++i) {
          const test::GoldenResult& r = results[i];
          MESSAGE(cases[i].name, " batched, ", std::string(elem_type_name(kv)), " KV", forced ? ", coopmat decode" : "",
                  ": worst row NMSE ", r.worst_row_nmse, " (limit ", r.limit, "), greedy ", r.greedy_compared, "/",
                  cases[i].greedy_tokens.size());
          CHECK(r.tokenization_ok);
          CHECK(r.worst_row_nmse <= r.limit);
          CHECK(r.greedy_ok);
        }
      }
  }
}

// Many sequences on the Vulkan backend give each sequence what it gets alone (within the op tolerances: the kernels
// differ between step shapes, so not bit for bit as on the CPU).
TEST_CASE("vk batched steps equal each sequence run alone") {
  std::vector<std::string> paths;
  for (const std::string name : {"stories260K-q8_0.gguf", "synth-qwen3-d256-q4_k_m.gguf"})
    paths.push_back(test::shared_path("models/" + name));
  for (const std::string& path : next_vk_models()) paths.push_back(path);
  for (const std::string& path : paths) {
    const std::string name = std::filesystem::path(path).filename().string();
    CAPTURE(name);
    // f32 activations in the decode matvecs (int8 ones round each op's input, ~1e-5, and would hide the check).
    vk::VkBackendOptions options;
    options.q8_activations = false;
    Engine batched = Engine::open(path, vk::test::test_backend(options), {.ctx = 128, .max_batch = 64, .max_seqs = 6});
    const auto seqs = test::run_batch_scenario(batched);
    CHECK(batched.kv_cache().used_pages() == 0);
    Engine alone = Engine::open(path, vk::test::test_backend(options), {.ctx = 128, .max_batch = 128});
    // f16-operand matmuls (cooperative matrices) in steps of more than 16 tokens; else f32 kernels whose summation
    // orders differ between step shapes, and one-token steps fuse the rmsnorm into the matvec where batched ones of
    // 5..16 tokens normalize first (up to ~1.2e-7 after the layers of stories260K). A sequence mixed up with another
    // or a wrong position: NMSE ~1.
    const double limit = vk::uses_cooperative_matrix(alone.backend()) ? 1e-5 : 1e-6;
    for (size_t k = 0; k < seqs.size(); ++k) {
      CAPTURE(k);
      alone.reset();
      const std::vector<float> all = alone.prefill_all_logits(seqs[k].history);
      const size_t vocab = size_t(alone.vocab_size());
      for (const auto& [pos, row] : seqs[k].logits) {
        const double e = test::nmse(row.data(), all.data() + size_t(pos) * vocab, vocab);
        CHECK_MESSAGE(e <= limit, "position ", pos, ": NMSE ", e);
      }
    }
    CHECK(vk::validation_messages(batched.backend()).empty());
  }
}

// Backend::set_step_timing: each step's device time from two timestamps, only when asked (a step pays nothing for it
// otherwise), and never counted twice with profiling's own spans. (Every device these tests run on, lavapipe
// included, has timestamps on its compute queue.)
TEST_CASE("vk step timing: a step's device time only when asked") {
  Engine e = Engine::open(test::shared_path("models/stories260K.gguf"), vk::test::test_backend(), {.ctx = 64});
  const std::vector<model::TokenId> prompt = {1, 400, 300, 200, 100, 50};
  e.prefill(prompt);
  e.decode(7);
  CHECK(e.timings().device_s == 0.0);
  e.backend().set_step_timing(true);
  e.decode(8);
  const double one = e.timings().device_s;
  CHECK(one > 0.0);
  CHECK(one < 10.0);
  e.decode(9);
  CHECK(e.timings().device_s > one);
  e.backend().set_step_timing(false);
  const double off = e.timings().device_s;
  e.decode(10);
  CHECK(e.timings().device_s == off);
  CHECK(vk::validation_messages(e.backend()).empty());
}
