// ModelConfig::from_gguf on every shared model (values checked against what llama.cpp reports for them) and on
// small generated files that break one rule each.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <random>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model_config.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace greta;
using namespace greta::model;

using test::TinyModel;

namespace {

ModelConfig load(const std::string& name) {
  return ModelConfig::from_gguf(GgufFile::open(test::shared_path("models/" + name)));
}

void expect_config_error(const TinyModel& m, const std::string& needle) {
  try {
    m.config();
  } catch (const Error& e) {
    INFO("message: ", e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    return;
  }
  FAIL("no error, expected: ", needle);
}

}  // namespace

TEST_CASE("model config: stories260K") {
  for (const char* n : {"stories260K.gguf", "stories260K-f16.gguf", "stories260K-q8_0.gguf", "stories260K-q4_0.gguf"}) {
    INFO(n);
    ModelConfig c = load(n);
    CHECK(c.arch == Arch::Llama);
    CHECK(c.dim == 64);
    CHECK(c.n_layers == 5);
    CHECK(c.n_heads == 8);
    CHECK(c.n_kv_heads == 4);
    CHECK(c.head_dim == 8);
    CHECK(c.head_dim_v == 8);
    CHECK(c.ffn_dim == 172);
    CHECK(c.vocab_size == 512);
    CHECK(c.context_length == 2048);
    CHECK(c.rope_dims == 8);
    CHECK(c.rope_base == 10000.f);
    CHECK(c.rms_eps == doctest::Approx(1e-5));
    CHECK(c.rope_pairing == RopePairing::Adjacent);
    CHECK(!c.tied_embeddings);
    CHECK(!c.qkv_bias);
    CHECK(!c.qk_norm);
  }
}

TEST_CASE("model config: every shared model loads") {
  for (const auto& e : std::filesystem::directory_iterator(test::shared_path("models"))) {
    if (e.path().extension() != ".gguf") continue;
    INFO(e.path().string());
    CHECK_NOTHROW(ModelConfig::from_gguf(GgufFile::open(e.path().string())));
  }
  ModelConfig t = load("llama2-tiny-random.gguf");
  CHECK(t.dim == 8);
  CHECK(t.n_layers == 1);
  CHECK(t.vocab_size == 32000);
  CHECK(t.head_dim == 4);
  CHECK(t.context_length == 4096);

  for (const char* n : {"synth-llama-d256-q4_k_m.gguf", "synth-llama-d256-bf16.gguf", "synth-llama-d256-q2_k.gguf"}) {
    ModelConfig c = load(n);
    CHECK(c.dim == 256);
    CHECK(c.n_layers == 2);
    CHECK(c.n_heads == 8);
    CHECK(c.n_kv_heads == 2);
    CHECK(c.head_dim == 32);
    CHECK(c.ffn_dim == 256);
    CHECK(c.vocab_size == 512);
  }
}

TEST_CASE("model config: qwen2, qwen3 and tied embeddings") {
  ModelConfig q2 = load("synth-qwen2-d256-q8_0.gguf");
  CHECK(q2.arch == Arch::Qwen2);
  CHECK(std::string(arch_name(q2.arch)) == "qwen2");
  CHECK(q2.head_dim == 64);
  CHECK(q2.n_heads == 4);
  CHECK(q2.n_kv_heads == 2);
  CHECK(q2.rope_base == 1e6f);
  CHECK(q2.rope_pairing == RopePairing::NeoxHalves);
  CHECK(q2.qkv_bias);
  CHECK(!q2.qk_norm);
  CHECK(q2.name == "synth-qwen2-d256");

  ModelConfig q3 = load("synth-qwen3-d256-q4_k_m.gguf");
  CHECK(q3.arch == Arch::Qwen3);
  CHECK(q3.qk_norm);
  CHECK(!q3.qkv_bias);
  CHECK(q3.head_dim == 64);
  CHECK(q3.rope_pairing == RopePairing::NeoxHalves);

  ModelConfig tied = load("synth-llama-tied-d256-q8_0.gguf");
  CHECK(tied.tied_embeddings);
  CHECK(tied.n_kv_heads == 1);
  CHECK(tied.rope_base == 5e5f);
  CHECK(tied.n_layers == 1);
}

TEST_CASE("model config: generated models and their errors") {
  TinyModel m;
  ModelConfig c = m.config();
  CHECK(c.dim == 64);
  CHECK(c.head_dim == 16);  // key_length differs from dim / heads
  CHECK(c.rope_dims == 16);
  CHECK(c.rope_base == 50000.f);
  CHECK(c.rms_eps == doctest::Approx(1e-6));
  CHECK(c.vocab_size == 40);

  SUBCASE("tied") { m.tied = true; CHECK(m.config().tied_embeddings); }
  SUBCASE("llama with biases") { m.biases = true; CHECK(m.config().qkv_bias); }
  SUBCASE("linear rope scaling") {
    m.extra_meta = [](GgufWriter& w) {
      w.add_string("llama.rope.scaling.type", "linear");
      w.add_float32("llama.rope.scaling.factor", 4.f);
    };
    CHECK(m.config().rope_scale == 0.25f);
  }
  SUBCASE("unsupported architecture") { m.arch = "gemma2"; expect_config_error(m, "unsupported architecture 'gemma2'"); }
  SUBCASE("no architecture") { m.skip_keys = {"general.architecture"}; expect_config_error(m, "general.architecture"); }
  SUBCASE("missing key") { m.skip_keys = {"block_count"}; expect_config_error(m, "'llama.block_count'"); }
  SUBCASE("vocab_size disagrees") {
    m.extra_meta = [](GgufWriter& w) { w.add_uint32("llama.vocab_size", 41); };
    expect_config_error(m, "vocab_size");
  }
  SUBCASE("token list longer than the embedding") {
    m.extra_meta = [](GgufWriter& w) {
      std::vector<std::string> toks(41, "t");
      w.add_string_array("tokenizer.ggml.tokens", std::span<const std::string>(toks));
    };
    expect_config_error(m, "tokenizer.ggml.tokens has 41 entries");
  }
  SUBCASE("token list matching the embedding") {
    m.extra_meta = [](GgufWriter& w) {
      std::vector<std::string> toks(40, "t");
      w.add_string_array("tokenizer.ggml.tokens", std::span<const std::string>(toks));
    };
    CHECK(m.config().vocab_size == 40);
  }
  SUBCASE("experts on a dense architecture") {
    m.extra_meta = [](GgufWriter& w) { w.add_uint32("llama.expert_count", 8); };
    expect_config_error(m, "no mixture-of-experts layers");
  }
  SUBCASE("yarn") {
    m.extra_meta = [](GgufWriter& w) {
      w.add_string("llama.rope.scaling.type", "yarn");
      w.add_float32("llama.rope.scaling.factor", 32.f);
      w.add_uint32("llama.rope.scaling.original_context_length", 4096);
    };
    const ModelConfig c = m.config();
    CHECK(c.rope_yarn);
    CHECK(c.rope_scale == 1.f / 32);
    CHECK(c.rope_ctx_orig == 4096);
  }
  SUBCASE("unknown rope scaling") {
    m.extra_meta = [](GgufWriter& w) { w.add_string("llama.rope.scaling.type", "dynamic"); };
    expect_config_error(m, "'dynamic'");
  }
  SUBCASE("kv heads not dividing heads") { m.kv_heads = 3; expect_config_error(m, "multiple of head_count_kv"); }
  SUBCASE("absurd layer count") {
    m.extra_meta = [](GgufWriter& w) { w.add_uint32("llama.block_count", 0); };
    m.skip_keys = {"block_count"};
    expect_config_error(m, "outside");
  }
  SUBCASE("key of the wrong type") {
    m.skip_keys = {"head_count"};
    m.extra_meta = [](GgufWriter& w) { w.add_string("llama.attention.head_count", "4"); };
    expect_config_error(m, "'llama.attention.head_count' is string");
  }
}
