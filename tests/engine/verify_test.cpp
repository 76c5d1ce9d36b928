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

LoadedModel load(const char* name, const char* folder = "models/") {
  model::GgufFile file = model::GgufFile::open(test::shared_path(std::string(folder) + name));
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

namespace {

// Adds an error to the attention output of one sequence's tokens only: a kernel that mixes up sequences.
class OneSequenceNoiseBackend : public cpu::CpuBackend {
public:
  using cpu::CpuBackend::CpuBackend;
  std::string name() const override { return "cpu with noise in sequence 1's attention"; }

protected:
  void run_op(cpu::CpuPlan& plan, const PlanOp& op) override {
    cpu::CpuBackend::run_op(plan, op);
    const auto* a = std::get_if<AttentionOp>(&op.op);
    if (!a) return;
    const int32_t* seq = i32(plan, a->seq);
    float* out = f32(plan, a->out);
    const int64_t row = a->n_heads * a->head_dim_v;
    for (int64_t t = 0; t < a->n_tokens; ++t)
      if (seq[t] == 1)
        for (int64_t i = 0; i < row; ++i) out[t * row + i] *= 1.05f;
  }
};

}  // namespace

TEST_CASE("verify: a batched step of two sequences and padding; the failure names the sequence and token") {
  const LoadedModel m = load("stories260K.gguf");
  PlanShape shape;
  shape.n_tokens = 16;
  shape.n_seqs = 3;
  shape.n_logit_rows = 16;
  shape.kv = {.page_size = 32, .n_pages = 5, .pages_per_seq = 2, .type = ElemType::F16};
  const Plan plan = build_plan(m.config, m.weights, shape);
  // Sequence 0: 7 tokens at positions 0..6 on page 3; sequence 1: 8 tokens at 0..7 on page 1; one padding token.
  StepArrays a;
  a.page_table = {3, 4, 1, 2, 0, 0};
  for (int t = 0; t < 16; ++t) {
    const bool first = t < 7, pad = t == 15;
    const int pos = pad ? 0 : first ? t : t - 7;
    a.tokens.push_back(pad ? 0 : kTokens[size_t(t % 9)]);
    a.positions.push_back(pos);
    a.seq.push_back(pad ? 2 : first ? 0 : 1);
    a.kv_rows.push_back(pad ? 0 : (first ? 3 : 1) * 32 + pos);
  }
  cpu::CpuBackend reference({.threads = 2}), same({.threads = 3});
  OneSequenceNoiseBackend broken({.threads = 2});
  for (Backend* b : {static_cast<Backend*>(&reference), static_cast<Backend*>(&same), static_cast<Backend*>(&broken)})
    b->load_weights(m.weights.table);
  auto ref_plan = reference.prepare(plan), same_plan = same.prepare(plan), broken_plan = broken.prepare(plan);
  VerifyReport ok, bad;
  verify_step(same, *same_plan, reference, *ref_plan, a.view(), 0, {.max_nmse = 0.0}, ok);
  CHECK_MESSAGE(ok.ok(), ok.summary());
  verify_step(broken, *broken_plan, reference, *ref_plan, a.view(), 0, {.max_nmse = 1e-6}, bad);
  REQUIRE_FALSE(bad.ok());
  MESSAGE(bad.summary());
  CHECK(bad.first_failure->kind == OpKind::Attention);
  CHECK(bad.first_failure->layer == 0);
  CHECK(bad.first_failure->seq == 1);
  CHECK(bad.first_failure->token >= 7);
  CHECK(bad.summary().find("in sequence 1 at token") != std::string::npos);
}

TEST_CASE("verify: a broken expert is named with its layer and op") {
  const LoadedModel m = load("synth-qwen3moe-d128-q8_0.gguf", "next/models/");
  for (int32_t expert : {0, 3, 7}) {
    CAPTURE(expert);
    cpu::CpuBackend reference({.threads = 2});
    test::NoisyExpertBackend broken({.threads = 2}, "blk.1.ffn_up_exps", expert);
    const VerifyReport report = verify(m.config, m.weights, broken, reference, kTokens, {});
    if (report.ok()) continue;  // the prompt never routes to this expert in layer 1
    const OpCheck& f = *report.first_failure;
    CHECK(f.label == "blk.1.ffn_up_exps");
    CHECK(f.layer == 1);
    CHECK(f.kind == OpKind::MoeMatMul);
    CHECK(f.expert == expert);
    CHECK(f.token >= 0);
    CHECK(report.summary().find(cat("(moe_matmul, layer 1, expert ", expert, ")")) != std::string::npos);
  }
  // At least one of them is used (8 experts, 2 per token, 9 tokens): the test above did check something.
  int failures = 0;
  for (int32_t expert = 0; expert < 8; ++expert) {
    cpu::CpuBackend reference({.threads = 2});
    test::NoisyExpertBackend broken({.threads = 2}, "blk.1.ffn_up_exps", expert);
    failures += !verify(m.config, m.weights, broken, reference, kTokens, {}).ok();
  }
  CHECK(failures >= 2);
}
