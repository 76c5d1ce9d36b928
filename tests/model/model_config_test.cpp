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

using namespace greta;
using namespace greta::model;

namespace {

ModelConfig load(const std::string& name) {
  return ModelConfig::from_gguf(GgufFile::open(test::shared_path("models/" + name)));
}

// A tiny but complete model description; `edit` may change anything before the file is built.
struct TinyModel {
  std::string arch = "llama";
  uint64_t dim = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16, ffn = 96, vocab = 40;
  bool biases = false, qk_norm = false, tied = false;
  GgmlType weight_type = GgmlType::F32;
  std::function<void(GgufWriter&)> extra_meta;
  std::set<std::string> skip_tensors;
  std::map<std::string, std::vector<uint64_t>> shape_override;
  std::map<std::string, GgmlType> type_override;
  std::set<std::string> skip_keys;

  std::vector<uint8_t> build() const {
    GgufWriter w;
    auto key = [&](const std::string& k) { return !skip_keys.count(k); };
    if (key("general.architecture")) w.add_string("general.architecture", arch);
    auto a = [&](const char* s) { return arch + "." + s; };
    if (key("embedding_length")) w.add_uint32(a("embedding_length"), uint32_t(dim));
    if (key("block_count")) w.add_uint32(a("block_count"), uint32_t(layers));
    if (key("head_count")) w.add_uint32(a("attention.head_count"), uint32_t(heads));
    w.add_uint32(a("attention.head_count_kv"), uint32_t(kv_heads));
    w.add_uint32(a("attention.key_length"), uint32_t(head_dim));
    w.add_uint32(a("feed_forward_length"), uint32_t(ffn));
    w.add_uint32(a("context_length"), 256);
    w.add_float32(a("attention.layer_norm_rms_epsilon"), 1e-6f);
    w.add_float32(a("rope.freq_base"), 50000.f);
    if (extra_meta) extra_meta(w);
    auto add = [&](const std::string& name, std::vector<uint64_t> dims, GgmlType type) {
      if (skip_tensors.count(name)) return;
      if (auto it = shape_override.find(name); it != shape_override.end()) dims = it->second;
      if (auto it = type_override.find(name); it != type_override.end()) type = it->second;
      w.add_tensor(name, dims, type);
    };
    add("token_embd.weight", {dim, vocab}, weight_type);
    add("output_norm.weight", {dim}, GgmlType::F32);
    if (!tied) add("output.weight", {dim, vocab}, weight_type);
    for (uint64_t l = 0; l < layers; ++l) {
      std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {dim}, GgmlType::F32);
      add(p + "attn_q.weight", {dim, heads * head_dim}, weight_type);
      add(p + "attn_k.weight", {dim, kv_heads * head_dim}, weight_type);
      add(p + "attn_v.weight", {dim, kv_heads * head_dim}, weight_type);
      add(p + "attn_output.weight", {heads * head_dim, dim}, weight_type);
      if (biases) {
        add(p + "attn_q.bias", {heads * head_dim}, GgmlType::F32);
        add(p + "attn_k.bias", {kv_heads * head_dim}, GgmlType::F32);
        add(p + "attn_v.bias", {kv_heads * head_dim}, GgmlType::F32);
      }
      if (qk_norm) {
        add(p + "attn_q_norm.weight", {head_dim}, GgmlType::F32);
        add(p + "attn_k_norm.weight", {head_dim}, GgmlType::F32);
      }
      add(p + "ffn_norm.weight", {dim}, GgmlType::F32);
      add(p + "ffn_gate.weight", {dim, ffn}, weight_type);
      add(p + "ffn_up.weight", {dim, ffn}, weight_type);
      add(p + "ffn_down.weight", {ffn, dim}, weight_type);
    }
    std::vector<std::vector<uint8_t>> data;
    std::mt19937 rng(5);
    for (size_t i = 0; i < w.tensor_count(); ++i) {
      data.emplace_back(w.tensor_bytes(i));
      for (auto& b : data.back()) b = uint8_t(rng());
    }
    return w.to_bytes(data);
  }
  ModelConfig config() const { return ModelConfig::from_gguf(GgufFile::from_memory(build(), "tiny.gguf")); }
};

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
  SUBCASE("qwen3") {
    m.arch = "qwen3";
    m.qk_norm = true;
    CHECK(m.config().qk_norm);
    m.biases = true;
    expect_config_error(m, "unexpected tensor 'blk.0.attn_q.bias'");
  }
  SUBCASE("unsupported architecture") { m.arch = "gemma2"; expect_config_error(m, "unsupported architecture 'gemma2'"); }
  SUBCASE("no architecture") { m.skip_keys = {"general.architecture"}; expect_config_error(m, "general.architecture"); }
  SUBCASE("missing key") { m.skip_keys = {"block_count"}; expect_config_error(m, "'llama.block_count'"); }
  SUBCASE("qwen2 without biases") { m.arch = "qwen2"; expect_config_error(m, "missing tensor 'blk.0.attn_q.bias'"); }
  SUBCASE("qwen3 without q/k norms") { m.arch = "qwen3"; expect_config_error(m, "attn_q_norm.weight"); }
  SUBCASE("missing layer tensor") {
    m.skip_tensors = {"blk.1.ffn_up.weight"};
    expect_config_error(m, "missing tensor 'blk.1.ffn_up.weight'");
  }
  SUBCASE("wrong shape") {
    m.shape_override["blk.1.attn_k.weight"] = {64, 48};
    expect_config_error(m, "'blk.1.attn_k.weight' has shape [64, 48], the metadata implies [64, 32]");
  }
  SUBCASE("extra layer") {
    m.extra_meta = [](GgufWriter& w) { w.add_tensor("blk.2.attn_norm.weight", {64}, GgmlType::F32); };
    expect_config_error(m, "unexpected tensor 'blk.2.attn_norm.weight'");
  }
  SUBCASE("quantized norm") {
    m.type_override["output_norm.weight"] = GgmlType::F16;
    expect_config_error(m, "must be f32");
  }
  SUBCASE("unsupported weight type") {
    m.weight_type = GgmlType::Q8_0;
    m.dim = 256;
    m.ffn = 256;
    m.type_override["blk.0.ffn_up.weight"] = GgmlType::Q8_K;
    expect_config_error(m, "type q8_K");
  }
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
  SUBCASE("mixture of experts") {
    m.extra_meta = [](GgufWriter& w) { w.add_uint32("llama.expert_count", 8); };
    expect_config_error(m, "mixture-of-experts");
  }
  SUBCASE("yarn") {
    m.extra_meta = [](GgufWriter& w) { w.add_string("llama.rope.scaling.type", "yarn"); };
    expect_config_error(m, "'yarn'");
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
