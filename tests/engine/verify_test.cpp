// Verify mode: CPU vs CPU agrees exactly across thread counts; a deliberately broken backend is caught at the right
// op, layer and step.
#include <doctest/doctest.h>

#include <memory>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/model.h"
#include "engine/verify.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "perturbed_backends.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;

namespace {

struct LoadedModel {
  model::GgufFile file;
  model::ModelConfig config;
  ModelWeights weights;
};

LoadedModel load(const char* name) {
  model::GgufFile file = model::GgufFile::open(test::shared_path(std::string("models/") + name));
  model::ModelConfig config = model::ModelConfig::from_gguf(file);
  ModelWeights weights = map_weights(file, config);
  return {std::move(file), std::move(config), std::move(weights)};
}

const std::vector<TokenId> kTokens = {1, 403, 407, 261, 378, 432, 383, 286, 261};

}  // namespace

TEST_CASE("verify: the CPU backend with 1 and 3 threads agrees exactly on every op") {
  for (const char* name : {"synth-qwen3-d256-q4_k_m.gguf", "synth-qwen2-d256-q8_0.gguf", "stories260K.gguf"}) {
    CAPTURE(name);
    const LoadedModel m = load(name);
    cpu::CpuBackend one({.threads = 1}), three({.threads = 3});
    const VerifyReport report = verify(m.config, m.weights, three, one, kTokens, {.max_nmse = 0.0, .resync = false});
    CHECK_MESSAGE(report.ok(), report.summary());
    CHECK(report.worst_nmse == 0.0);
    // One prefill step plus two decode steps, every op checked.
    const size_t ops_per_step = build_plan(m.config, m.weights, PlanShape::single(1, 16, false)).ops.size();
    CHECK(report.checks.size() == 3 * ops_per_step);
    CHECK(report.summary().find("verify OK") == 0);
  }
}

TEST_CASE("verify: a noisy op in one layer is reported as the first failure, with its label and layer") {
  const LoadedModel m = load("synth-qwen3-d256-q4_k_m.gguf");
  for (bool resync : {true, false}) {
    CAPTURE(resync);
    test::NoisyOpBackend broken({.threads = 2}, "blk.1.ffn_up", 1e-2f);
    cpu::CpuBackend reference({.threads = 2});
    const VerifyReport report = verify(m.config, m.weights, broken, reference, kTokens, {.resync = resync});
    REQUIRE_FALSE(report.ok());
    const OpCheck& f = *report.first_failure;
    CHECK(f.label == "blk.1.ffn_up");
    CHECK(f.layer == 1);
    CHECK(f.kind == OpKind::MatMul);
    CHECK(f.step == 0);
    CHECK(f.nmse > 1e-5);
    CHECK(report.summary().find("blk.1.ffn_up (matmul, layer 1)") != std::string::npos);
    // Everything before the broken op matched exactly.
    for (const OpCheck& c : report.checks) {
      if (c.step == 0 && c.op_index == f.op_index) break;
      CHECK(c.nmse == 0.0);
    }
    // With resync each later op sees the reference's inputs: only the broken op fails, in every step.
    if (resync)
      for (const OpCheck& c : report.checks) CHECK(c.ok == (c.label != "blk.1.ffn_up"));
  }
}

TEST_CASE("verify: a KV-cache off-by-one and a swapped rope pairing are located") {
  const LoadedModel m = load("stories260K.gguf");
  {
    test::KvOffByOneBackend broken({.threads = 2});
    cpu::CpuBackend reference({.threads = 2});
    const VerifyReport report = verify(m.config, m.weights, broken, reference, kTokens);
    REQUIRE_FALSE(report.ok());
    CHECK(report.first_failure->label == "blk.0.k_cache");
    CHECK(report.first_failure->kind == OpKind::KvWrite);
    MESSAGE(report.summary());
  }
  {
    test::SwappedRopePairingBackend broken({.threads = 2});
    cpu::CpuBackend reference({.threads = 2});
    const VerifyReport report = verify(m.config, m.weights, broken, reference, kTokens);
    REQUIRE_FALSE(report.ok());
    CHECK(report.first_failure->label == "blk.0.rope_q");
    CHECK(report.first_failure->layer == 0);
  }
}

TEST_CASE("verify: bad token lists are errors") {
  const LoadedModel m = load("stories260K.gguf");
  cpu::CpuBackend a({.threads = 1}), b({.threads = 1});
  CHECK_THROWS_AS(verify(m.config, m.weights, a, b, {}), Error);
  const std::vector<TokenId> bad = {1, 100000};
  CHECK_THROWS_AS(verify(m.config, m.weights, a, b, bad), Error);
}
