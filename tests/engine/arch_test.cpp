// The architecture files (src/engine/arch/): each reads exactly its tensors, checks their shapes and types against
// the config and builds a plan of the ops its forward pass needs. Generated files that break one rule each, then the
// plans of the next/ models against what each architecture promises.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <cmath>
#include <string>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "model/synth.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace greta;
using test::TinyModel;

namespace {

void expect_weights_error(const TinyModel& m, const std::string& needle) {
  const model::GgufFile file = m.file();
  const model::ModelConfig config = model::ModelConfig::from_gguf(file);
  try {
    engine::map_weights(file, config);
  } catch (const Error& e) {
    INFO("message: ", e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    return;
  }
  FAIL("no error, expected: ", needle);
}

int count_ops(const engine::Plan& p, engine::OpKind kind) {
  return int(std::count_if(p.ops.begin(), p.ops.end(), [&](const engine::PlanOp& o) { return o.kind() == kind; }));
}

}  // namespace

TEST_CASE("architectures: missing, misshapen and unexpected tensors are errors that name the tensor") {
  TinyModel m;
  SUBCASE("complete") {
    const model::GgufFile file = m.file();
    CHECK_NOTHROW(engine::map_weights(file, model::ModelConfig::from_gguf(file)));
  }
  SUBCASE("qwen3 with biases") {
    m.arch = "qwen3";
    m.qk_norm = true;
    m.biases = true;
    expect_weights_error(m, "unexpected tensor 'blk.0.attn_q.bias'");
  }
  SUBCASE("qwen2 without biases") { m.arch = "qwen2"; expect_weights_error(m, "missing tensor 'blk.0.attn_q.bias'"); }
  SUBCASE("qwen3 without q/k norms") { m.arch = "qwen3"; expect_weights_error(m, "attn_q_norm.weight"); }
  SUBCASE("missing layer tensor") {
    m.skip_tensors = {"blk.1.ffn_up.weight"};
    expect_weights_error(m, "missing tensor 'blk.1.ffn_up.weight'");
  }
  SUBCASE("wrong shape") {
    m.shape_override["blk.1.attn_k.weight"] = {64, 48};
    expect_weights_error(m, "'blk.1.attn_k.weight' has shape [64, 48], the metadata implies [64, 32]");
  }
  SUBCASE("extra layer") {
    m.extra_meta = [](model::GgufWriter& w) { w.add_tensor("blk.2.attn_norm.weight", {64}, model::GgmlType::F32); };
    expect_weights_error(m, "unexpected tensor 'blk.2.attn_norm.weight'");
  }
  SUBCASE("quantized norm") {
    m.type_override["output_norm.weight"] = model::GgmlType::F16;
    expect_weights_error(m, "must be f32");
  }
  SUBCASE("unsupported weight type") {
    m.weight_type = model::GgmlType::Q8_0;
    m.dim = 256;
    m.ffn = 256;
    m.type_override["blk.0.ffn_up.weight"] = model::GgmlType::Q8_K;
    expect_weights_error(m, "type q8_K");
  }
  SUBCASE("some of the biases") {
    m.biases = true;
    m.skip_tensors = {"blk.1.attn_v.bias"};
    expect_weights_error(m, "only some of the attn_q/k/v biases");
  }
}

TEST_CASE("architectures: the next/ models map every tensor and plan the ops their architecture promises") {
  struct Expect {
    const char* file;
    int moe_layers, swa_layers, sinks, post_norms;
    engine::GluKind glu;
    float embed_scale;
  };
  const Expect cases[] = {
      {"synth-qwen3moe-d128-q8_0.gguf", 2, 0, 0, 0, engine::GluKind::SiLU, 1.f},
      {"synth-gemma3-d128-q8_0.gguf", 0, 5, 0, 12, engine::GluKind::GeluTanh, std::sqrt(128.f)},
      {"synth-phi3-d256-q4_k_m.gguf", 0, 0, 0, 0, engine::GluKind::SiLU, 1.f},
      {"synth-gptoss-d128-q8_0.gguf", 2, 1, 2, 0, engine::GluKind::SwiGluOai, 1.f},
  };
  for (const Expect& e : cases) {
    CAPTURE(e.file);
    const model::GgufFile file = model::GgufFile::open(test::shared_path(std::string("next/models/") + e.file));
    const model::ModelConfig c = model::ModelConfig::from_gguf(file);
    const engine::ModelWeights w = engine::map_weights(file, c);
    const engine::Plan p = engine::build_plan(c, w, engine::PlanShape::single(5, 64, false));
    CHECK(count_ops(p, engine::OpKind::MoeRoute) == e.moe_layers);
    CHECK(count_ops(p, engine::OpKind::MoeMatMul) == 3 * e.moe_layers);
    int swa = 0, sinks = 0, post_norms = 0;
    for (const engine::PlanOp& op : p.ops) {
      if (const auto* a = std::get_if<engine::AttentionOp>(&op.op)) {
        swa += a->window > 0;
        sinks += a->sinks != engine::kNoWeight;
        if (a->window > 0) CHECK(a->window == c.sliding_window);
      }
      if (const auto* g = std::get_if<engine::GluOp>(&op.op)) CHECK(g->kind == e.glu);
      if (const auto* em = std::get_if<engine::EmbedOp>(&op.op)) CHECK(em->scale == doctest::Approx(e.embed_scale));
      post_norms += op.label.find("post_") != std::string::npos;
    }
    CHECK(swa == e.swa_layers);
    CHECK(sinks == e.sinks);
    CHECK(post_norms == e.post_norms);
  }
  // phi3's fused tensors are used in place: the Q/K/V and gate/up slices point into the file's bytes.
  const model::GgufFile phi3 = model::GgufFile::open(test::shared_path("next/models/synth-phi3-d256-q4_k_m.gguf"));
  const model::ModelConfig pc = model::ModelConfig::from_gguf(phi3);
  const engine::ModelWeights pw = engine::map_weights(phi3, pc);
  const engine::WeightDesc& q = pw.table[size_t(pw.layers[0].wq)];
  const engine::WeightDesc& k = pw.table[size_t(pw.layers[0].wk)];
  CHECK(static_cast<const uint8_t*>(k.data) == static_cast<const uint8_t*>(q.data) + q.bytes);
  CHECK(q.rows == pc.n_heads * pc.head_dim);
  CHECK(pw.table[size_t(pw.layers[0].w_up)].rows == pc.ffn_dim);
}

TEST_CASE("architectures: synth writes every architecture at odd shapes, and each maps, plans and runs a step") {
  struct Shape {
    const char* arch;
    model::GgmlType type;
  };
  for (const Shape& s : {Shape{"qwen3moe", model::GgmlType::Q8_0}, Shape{"gemma3", model::GgmlType::Q4_0},
                         Shape{"phi3", model::GgmlType::F16}, Shape{"gpt-oss", model::GgmlType::MXFP4},
                         Shape{"gpt-oss", model::GgmlType::Q8_0}}) {
    CAPTURE(s.arch);
    model::SynthOptions o;
    o.arch = s.arch;
    o.dim = 96;
    o.n_layers = 3;
    o.n_heads = 6;
    o.n_kv_heads = 2;
    o.ffn_dim = 160;
    o.expert_ffn_dim = 64;
    o.n_experts = 5;
    o.n_experts_used = 3;
    o.sliding_window = 4;
    o.type = s.type;
    o.vocab_from = test::shared_path("vocab/ggml-vocab-llama-spm.gguf.xz");
    o.threads = 2;
    const std::string path =
        (std::filesystem::temp_directory_path() / cat("greta_arch_", s.arch, "_", model::type_name(s.type), ".gguf"))
            .string();
    model::synthesize_model(path, o);
    const model::GgufFile file = model::GgufFile::open(path);
    const model::ModelConfig c = model::ModelConfig::from_gguf(file);
    CHECK(c.arch_name == s.arch);
    const bool moe = c.arch == model::Arch::Qwen3Moe || c.arch == model::Arch::GptOss;
    CHECK(c.n_experts == (moe ? 5 : 0));
    CHECK(c.n_experts_used == (moe ? 3 : 0));
    if (c.arch == model::Arch::GptOss) CHECK(c.rope_yarn);
    CHECK(c.sliding_window == (c.arch == model::Arch::Gemma3 || c.arch == model::Arch::GptOss ? 4 : 0));
    const engine::ModelWeights w = engine::map_weights(file, c);
    // A step of 7 tokens past the window on the CPU: finite logits.
    cpu::CpuBackend cpu({.threads = 2});
    cpu.load_weights(w.table);
    const engine::Plan plan = engine::build_plan(c, w, engine::PlanShape::single(7, 32, false));
    auto prepared = cpu.prepare(plan);
    const std::vector<int32_t> tokens = {1, 450, 4996, 17354, 1701, 432, 29889};
    const engine::StepArrays step = engine::single_sequence_step(plan, tokens, 0);
    cpu.execute(*prepared, step.view());
    std::vector<float> logits(size_t(c.vocab_size));
    cpu.read(*prepared, plan.logits, 0, logits);
    CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
    CHECK(*std::max_element(logits.begin(), logits.end()) > *std::min_element(logits.begin(), logits.end()));
    std::filesystem::remove(path);
  }
}

TEST_CASE("sliding-window pool: the window's pages only, and the same logits as the whole context; forks and "
          "truncations past given-up pages recompute") {
  // gemma3's fixture: window 8, five of six layers sliding. 150 decode steps after a 5-token prompt.
  const std::string path = test::shared_path("next/models/synth-gemma3-d128-q8_0.gguf");
  engine::Engine e = engine::Engine::open(path, std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{2}),
                                          {.ctx = 256, .max_batch = 64});
  REQUIRE(e.swa_kv_cache() != nullptr);
  std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  std::vector<std::vector<float>> step_logits;
  std::span<const float> logits = e.prefill(tokens);
  for (int i = 0; i < 150; ++i) {
    step_logits.emplace_back(logits.begin(), logits.end());
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    tokens.push_back(next);
    logits = e.decode(next);
  }
  step_logits.emplace_back(logits.begin(), logits.end());
  const engine::KvCache& main = e.kv_cache();
  const engine::KvCache& swa = *e.swa_kv_cache();
  CHECK(main.used_pages() == main.pages_for(int64_t(tokens.size())));  // 155 positions: 5 pages
  CHECK(swa.used_pages() <= 2);  // the page of the last 8 positions (and the one before, across a boundary)

  // The whole sequence in one step of one pool (PlanShape::single: no sliding-window pool) on a fresh backend.
  cpu::CpuBackend cpu({.threads = 2});
  cpu.load_weights(e.weights().table);
  const engine::Plan plan =
      engine::build_plan(e.config(), e.weights(), engine::PlanShape::single(int64_t(tokens.size()), 256, true));
  auto prepared = cpu.prepare(plan);
  cpu.execute(*prepared, engine::single_sequence_step(plan, tokens, 0).view());
  const int64_t vocab = e.config().vocab_size;
  std::vector<float> all(size_t(int64_t(tokens.size()) * vocab));
  cpu.read(*prepared, plan.logits, 0, all);
  for (size_t s = 0; s < step_logits.size(); ++s) {
    CAPTURE(s);
    const size_t row = 4 + s;  // the logits after token 4 + s
    REQUIRE(std::equal(step_logits[s].begin(), step_logits[s].end(), all.begin() + int64_t(row) * vocab));
  }

  // A truncation into the given-up pages recomputes from the start; its logits are still the whole context's.
  const engine::SeqId seq = e.new_sequence();
  std::vector<engine::StepEntry> entry = {{seq, tokens, engine::LogitsWanted::Last}};
  e.step(entry);
  CHECK(swa.kept_from(seq) > 0);
  e.truncate_sequence(seq, 100);
  CHECK(main.length(seq) == 0);  // position 100 needs 93..99 from the sliding pool: gone, so start over
  const std::vector<int32_t> one = {tokens[100]};
  const engine::StepLogits& again = e.step({{seq, one, engine::LogitsWanted::Last}});
  REQUIRE(std::equal(again.row(0).begin(), again.row(0).end(), all.begin() + 100 * vocab));
  // A fork shares nothing it could not continue from.
  const engine::SeqId fork = e.fork_sequence(seq);
  CHECK(main.length(fork) % main.page_size() == 0);
  CHECK(swa.kept_from(fork) <= std::max<int64_t>(0, main.length(fork) - e.config().sliding_window + 1));
}
