// Synthetic models: written, read back with GgufFile + ModelConfig, shapes/types/metadata checked, and the
// dequantized weights' statistics compared with the generator's distribution.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/quants.h"
#include "model/synth.h"
#include "test_util.h"

using namespace greta;
using namespace greta::model;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("greta_synth_" + name)).string();
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct Stats {
  double mean = 0, std = 0, min = 1e30, max = -1e30;
};

Stats tensor_stats(const GgufTensor& t) {
  std::vector<float> row(t.row_length());
  double sum = 0, sum2 = 0;
  Stats s;
  const uint64_t rb = row_bytes(t.type, t.row_length());
  for (uint64_t r = 0; r < t.rows(); ++r) {
    dequantize_row(t.type, t.data + r * rb, row.data(), int64_t(row.size()));
    for (float v : row) {
      sum += v;
      sum2 += double(v) * v;
      s.min = std::min<double>(s.min, v);
      s.max = std::max<double>(s.max, v);
    }
  }
  const double n = double(t.n_elements);
  s.mean = sum / n;
  s.std = std::sqrt(std::max(0.0, sum2 / n - s.mean * s.mean));
  return s;
}

SynthOptions small_options() {
  SynthOptions o;
  o.dim = 256;
  o.n_layers = 3;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.ffn_dim = 512;
  o.context_length = 1024;
  o.vocab_from = test::shared_path("models/stories260K.gguf");
  o.seed = 11;
  o.threads = 2;
  return o;
}

}  // namespace

TEST_CASE("synth: llama q8_0 reads back with the requested shape and N(0, 0.02) weights") {
  SynthOptions o = small_options();
  parse_synth_type("Q8_0", o);
  const std::string path = temp_path("llama_q8.gguf");
  SynthSummary s = synthesize_model(path, o);
  CHECK(s.vocab_size == 512);
  CHECK(s.n_fallback_tensors == 0);
  CHECK(std::filesystem::file_size(path) == s.file_bytes);

  GgufFile f = GgufFile::open(path);
  ModelConfig c = ModelConfig::from_gguf(f);
  CHECK(c.arch == Arch::Llama);
  CHECK(c.dim == 256);
  CHECK(c.n_layers == 3);
  CHECK(c.n_heads == 4);
  CHECK(c.n_kv_heads == 2);
  CHECK(c.head_dim == 64);
  CHECK(c.ffn_dim == 512);
  CHECK(c.vocab_size == 512);
  CHECK(c.context_length == 1024);
  CHECK(c.rope_base == 10000.f);
  CHECK(!c.tied_embeddings);
  CHECK(f.get_uint("general.file_type") == 7u);
  uint64_t params = 0;
  for (const auto& t : f.tensors()) {
    params += t.n_elements;
    CHECK(t.type == (t.dims.size() == 1 ? GgmlType::F32 : GgmlType::Q8_0));
  }
  CHECK(params == s.n_params);

  // the tokenizer is copied verbatim
  GgufFile v = GgufFile::open(o.vocab_from);
  CHECK(f.get_string_array("tokenizer.ggml.tokens") == v.get_string_array("tokenizer.ggml.tokens"));
  CHECK(f.get_float_array("tokenizer.ggml.scores") == v.get_float_array("tokenizer.ggml.scores"));
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 1u);

  for (const char* name : {"blk.1.ffn_up.weight", "token_embd.weight", "output.weight", "blk.2.attn_k.weight"}) {
    INFO(name);
    Stats st = tensor_stats(*f.find_tensor(name));
    CHECK(std::fabs(st.mean) < 0.002);
    CHECK(st.std == doctest::Approx(0.02).epsilon(0.05));
    CHECK(st.max < 0.08);   // Irwin-Hall(4) is bounded at 3.46 sigma
    CHECK(st.min > -0.08);
    CHECK(st.max > 0.04);
  }
  Stats norm = tensor_stats(*f.find_tensor("blk.0.attn_norm.weight"));
  CHECK(norm.mean == doctest::Approx(1.0).epsilon(0.02));
  CHECK(norm.min >= 0.9);
  CHECK(norm.max <= 1.1);
  CHECK(norm.std > 0.03);
  std::filesystem::remove(path);
}

TEST_CASE("synth: deterministic across thread counts, seed-dependent") {
  SynthOptions o = small_options();
  o.n_layers = 1;
  parse_synth_type("q4_0", o);
  o.threads = 1;
  synthesize_model(temp_path("a.gguf"), o);
  o.threads = 3;
  synthesize_model(temp_path("b.gguf"), o);
  o.seed = 12;
  synthesize_model(temp_path("c.gguf"), o);
  auto a = file_bytes(temp_path("a.gguf")), b = file_bytes(temp_path("b.gguf")), c = file_bytes(temp_path("c.gguf"));
  CHECK(a == b);
  CHECK(a.size() == c.size());
  CHECK(a != c);
  for (auto n : {"a.gguf", "b.gguf", "c.gguf"}) std::filesystem::remove(temp_path(n));
}

TEST_CASE("synth: --repeat-chunk keeps the full file's layout and first chunk, then repeats that chunk") {
  // 24 experts x 512 rows x 256 f16 columns: 6 MiB per expert tensor, so its rows past the first 4 MiB (8192 rows of
  // 512 bytes) are repeats.
  SynthOptions o = small_options();
  o.arch = "qwen3moe";
  o.n_layers = 1;
  o.n_experts = 24;
  o.n_experts_used = 4;
  parse_synth_type("f16", o);
  const SynthSummary full = synthesize_model(temp_path("full.gguf"), o);
  o.repeat_first_chunk = true;
  const SynthSummary fast = synthesize_model(temp_path("fast.gguf"), o);
  CHECK(fast.file_bytes == full.file_bytes);
  CHECK(fast.n_params == full.n_params);
  {
    GgufFile a = GgufFile::open(temp_path("full.gguf")), b = GgufFile::open(temp_path("fast.gguf"));
    REQUIRE(a.tensors().size() == b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
      const GgufTensor &ta = a.tensors()[i], &tb = b.tensors()[i];
      CHECK(ta.name == tb.name);
      CHECK(ta.dims == tb.dims);
      CHECK(ta.type == tb.type);
      CHECK(ta.offset == tb.offset);
    }
    const GgufTensor* ea = a.find_tensor("blk.0.ffn_up_exps.weight");
    const GgufTensor* eb = b.find_tensor("blk.0.ffn_up_exps.weight");
    REQUIRE(ea != nullptr);
    REQUIRE(eb != nullptr);
    const uint64_t chunk = uint64_t(4) << 20;
    REQUIRE(eb->n_bytes > chunk);
    CHECK(std::memcmp(ea->data, eb->data, chunk) == 0);                  // the first chunk as a full synth writes it
    CHECK(std::memcmp(eb->data + chunk, eb->data, eb->n_bytes - chunk) == 0);  // then repeated
    CHECK(std::memcmp(ea->data + chunk, eb->data + chunk, eb->n_bytes - chunk) != 0);  // where the full one goes on
  }
  std::filesystem::remove(temp_path("full.gguf"));
  std::filesystem::remove(temp_path("fast.gguf"));
}

TEST_CASE("synth: qwen2 / qwen3 / q4_k_m mix / tied / fallback") {
  SynthOptions o = small_options();
  const std::string path = temp_path("arch.gguf");

  SUBCASE("qwen2 q4_k_m") {
    o.arch = "qwen2";
    parse_synth_type("q4_k_m", o);
    synthesize_model(path, o);
    GgufFile f = GgufFile::open(path);
    ModelConfig c = ModelConfig::from_gguf(f);
    CHECK(c.arch == Arch::Qwen2);
    CHECK(c.qkv_bias);
    CHECK(c.rope_base == 1e6f);
    CHECK(c.rope_pairing == RopePairing::NeoxHalves);
    CHECK(f.get_uint("general.file_type") == 15u);
    // llama.cpp's Q4_K_M: Q6_K for output and, with 3 layers, attn_v / ffn_down of layer 2 only (use_more_bits:
    // i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2)
    CHECK(f.find_tensor("output.weight")->type == GgmlType::Q6_K);
    CHECK(f.find_tensor("token_embd.weight")->type == GgmlType::Q4_K);
    CHECK(f.find_tensor("blk.0.attn_v.weight")->type == GgmlType::Q4_K);
    CHECK(f.find_tensor("blk.1.attn_v.weight")->type == GgmlType::Q4_K);
    CHECK(f.find_tensor("blk.2.attn_v.weight")->type == GgmlType::Q6_K);
    CHECK(f.find_tensor("blk.2.ffn_down.weight")->type == GgmlType::Q6_K);
    CHECK(f.find_tensor("blk.0.ffn_gate.weight")->type == GgmlType::Q4_K);
    Stats st = tensor_stats(*f.find_tensor("blk.0.ffn_gate.weight"));
    CHECK(st.std == doctest::Approx(0.02).epsilon(0.1));  // Q4_K adds a little quantization noise
    Stats bias = tensor_stats(*f.find_tensor("blk.0.attn_q.bias"));
    CHECK(bias.std == doctest::Approx(0.02).epsilon(0.15));
  }
  SUBCASE("qwen3 f16 with a head dim of its own") {
    o.arch = "qwen3";
    o.head_dim = 128;
    parse_synth_type("f16", o);
    synthesize_model(path, o);
    ModelConfig c = ModelConfig::from_gguf(GgufFile::open(path));
    CHECK(c.qk_norm);
    CHECK(c.head_dim == 128);
    CHECK(c.rms_eps == doctest::Approx(1e-6));
  }
  SUBCASE("tied bf16, multi-query") {
    o.tied_embeddings = true;
    o.n_kv_heads = 1;
    o.rope_base = 5e5f;
    parse_synth_type("bf16", o);
    synthesize_model(path, o);
    ModelConfig c = ModelConfig::from_gguf(GgufFile::open(path));
    CHECK(c.tied_embeddings);
    CHECK(c.n_kv_heads == 1);
    CHECK(c.rope_base == 5e5f);
  }
  // (MXFP4 is llama.cpp's MXFP4_MOE: experts only, the other matrices Q8_0; the MoE synth tests cover it.)
  SUBCASE("table formats: iq4_nl, iq4_xs (IQ4_NL where a row is not whole super-blocks)") {
    o.dim = 96;  // 96 = 3 x 32: IQ4_XS rows of 96 fall back to IQ4_NL, as llama.cpp's do
    o.n_heads = 2;
    o.ffn_dim = 256;
    for (const char* name : {"iq4_nl", "IQ4_XS"}) {
      INFO(name);
      parse_synth_type(name, o);
      SynthSummary s = synthesize_model(path, o);
      GgufFile f = GgufFile::open(path);
      CHECK_NOTHROW(ModelConfig::from_gguf(f));
      const GgmlType want = *type_from_name(name);
      CHECK(f.find_tensor("blk.0.ffn_down.weight")->type == want);  // rows of 256
      const GgufTensor* q = f.find_tensor("blk.0.attn_q.weight");   // rows of 96
      CHECK(q->type == GgmlType::IQ4_NL);
      CHECK((s.n_fallback_tensors > 0) == (want == GgmlType::IQ4_XS));
      CHECK(f.get_uint("general.file_type") == (want == GgmlType::IQ4_NL ? 25u : 30u));
      Stats st = tensor_stats(*f.find_tensor("blk.0.ffn_down.weight"));
      CHECK(st.std == doctest::Approx(0.02).epsilon(0.1));
    }
  }
  SUBCASE("rows that do not split into K blocks fall back") {
    o.dim = 96;
    o.n_heads = 2;
    o.ffn_dim = 160;
    parse_synth_type("q6_k", o);
    SynthSummary s = synthesize_model(path, o);
    CHECK(s.n_fallback_tensors > 0);
    GgufFile f = GgufFile::open(path);
    CHECK(f.find_tensor("blk.0.attn_q.weight")->type == GgmlType::Q8_0);  // 96 = 3 x 32
    CHECK_NOTHROW(ModelConfig::from_gguf(f));
  }
  std::filesystem::remove(path);
}

TEST_CASE("synth: bad options are errors") {
  SynthOptions o = small_options();
  CHECK_THROWS_WITH_AS(parse_synth_type("q7_z", o), doctest::Contains("q7_z"), Error);
  CHECK_THROWS_WITH_AS(parse_synth_type("q8_k", o), doctest::Contains("q8_k"), Error);
  const std::string path = temp_path("bad.gguf");
  auto expect = [&](SynthOptions bad, const char* needle) {
    CHECK_THROWS_WITH_AS(synthesize_model(path, bad), doctest::Contains(needle), Error);
    CHECK(!std::filesystem::exists(path));
  };
  SynthOptions b = o;
  b.n_kv_heads = 3;
  expect(b, "--kv-heads");
  b = o;
  b.arch = "gpt2";
  expect(b, "gpt2");
  b = o;
  b.dim = 250;
  expect(b, "--head-dim");
  b = o;
  b.vocab_from = "/nonexistent.gguf";
  expect(b, "cannot open");
  b = o;
  b.n_layers = 0;
  expect(b, "--layers");
}

TEST_CASE("synth: same tensor set, shapes, types and keys as llama.cpp's Q4_K_M of the same shape") {
  // ../shared/models/synth-llama-d256-q4_k_m.gguf was quantized by llama-quantize: dim 256, 2 layers, 8/2 heads,
  // ffn 256, the stories260K vocabulary.
  GgufFile ref = GgufFile::open(test::shared_path("models/synth-llama-d256-q4_k_m.gguf"));
  SynthOptions o = small_options();
  o.n_layers = 2;
  o.n_heads = 8;
  o.ffn_dim = 256;
  parse_synth_type("q4_k_m", o);
  const std::string path = temp_path("mix.gguf");
  synthesize_model(path, o);
  GgufFile f = GgufFile::open(path);
  REQUIRE(f.tensors().size() == ref.tensors().size());
  for (const auto& rt : ref.tensors()) {
    INFO(rt.name);
    const GgufTensor* t = f.find_tensor(rt.name);
    REQUIRE(t != nullptr);
    CHECK(t->dims == rt.dims);
    CHECK(t->type == rt.type);
  }
  for (const auto& kv : ref.metadata()) {
    INFO(kv.key);
    const GgufValue* v = f.find(kv.key);
    REQUIRE(v != nullptr);
    CHECK(v->type == kv.value.type);
  }
  std::filesystem::remove(path);
}
