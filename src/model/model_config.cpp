// ModelConfig::from_gguf: hyperparameters from "{arch}.*" metadata, then every tensor the architecture needs is
// checked against the shape those numbers imply (ggml order: dims[0] is the row length, i.e. the input width of a
// weight matrix). Like llama.cpp, a file with tensors the architecture does not use is rejected: they would belong
// to a feature (MoE experts, extra biases) that the engine would otherwise silently ignore.
#include "model/model_config.h"

#include <cmath>
#include <set>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"

namespace greta::model {

namespace {

constexpr int64_t k_max_width = int64_t(1) << 20;   // embedding / ffn / head widths: far above any real model
constexpr int64_t k_max_layers = 4096;
constexpr int64_t k_max_heads = 4096;
constexpr int64_t k_max_context = int64_t(1) << 32;

struct Reader {
  const GgufFile& f;
  std::string prefix;  // "llama."

  std::string key(std::string_view suffix) const { return prefix + std::string(suffix); }

  int64_t required_int(std::string_view suffix, int64_t lo, int64_t hi) const {
    std::string k = key(suffix);
    auto v = f.get_int(k);
    if (!v) fail(f.path(), ": missing metadata key '", k, "'");
    return check_range(k, *v, lo, hi);
  }
  int64_t optional_int(std::string_view suffix, int64_t fallback, int64_t lo, int64_t hi) const {
    std::string k = key(suffix);
    auto v = f.get_int(k);
    return v ? check_range(k, *v, lo, hi) : fallback;
  }
  int64_t check_range(const std::string& k, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi) fail(f.path(), ": metadata key '", k, "' = ", v, " is outside [", lo, ", ", hi, "]");
    return v;
  }
  std::optional<double> optional_float(std::string_view suffix) const {
    std::string k = key(suffix);
    auto v = f.get_float(k);
    if (v && !std::isfinite(*v)) fail(f.path(), ": metadata key '", k, "' is not a finite number");
    return v;
  }
};

std::string dims_string(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Checks the tensor set of a file against a config and records what was found.
class TensorChecker {
public:
  TensorChecker(const GgufFile& f) : f_(f) {}

  // Returns whether the tensor exists; when it does (or must), its shape and type are checked.
  bool check(const std::string& name, std::vector<uint64_t> shape, bool required, bool is_vector_param) {
    const GgufTensor* t = f_.find_tensor(name);
    if (!t) {
      if (required) fail(f_.path(), ": missing tensor '", name, "' (expected shape ", dims_string(shape), ")");
      return false;
    }
    used_.insert(name);
    if (t->dims != shape)
      fail(f_.path(), ": tensor '", name, "' has shape ", dims_string(t->dims), ", the metadata implies ",
           dims_string(shape));
    const TypeTraits& tr = traits(t->type);
    if (!tr.supported) fail(f_.path(), ": tensor '", name, "' has type ", tr.name, ", which GRETA does not support");
    if (is_vector_param && t->type != GgmlType::F32)
      fail(f_.path(), ": tensor '", name, "' (a norm or bias vector) must be f32, not ", tr.name);
    return true;
  }

  void reject_unused() const {
    for (const auto& t : f_.tensors())
      if (!used_.count(std::string(t.name)))
        fail(f_.path(), ": unexpected tensor '", t.name, "' (a feature this architecture reader does not support)");
  }

private:
  const GgufFile& f_;
  std::set<std::string> used_;
};

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
  }
  return "unknown";
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) fail(f.path(), ": missing metadata key 'general.architecture'");
  c.arch_name = std::string(*arch);
  if (c.arch_name == "llama") {
    c.arch = Arch::Llama;
    c.rope_pairing = RopePairing::Adjacent;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::Qwen2;
    c.rope_pairing = RopePairing::NeoxHalves;
  } else if (c.arch_name == "qwen3") {
    c.arch = Arch::Qwen3;
    c.rope_pairing = RopePairing::NeoxHalves;
  } else {
    fail(f.path(), ": unsupported architecture '", c.arch_name, "' (supported: llama, qwen2, qwen3)");
  }
  if (auto n = f.get_string("general.name")) c.name = std::string(*n);

  Reader r{f, c.arch_name + "."};
  if (r.optional_int("expert_count", 0, 0, k_max_heads) > 0)
    fail(f.path(), ": mixture-of-experts models (", r.key("expert_count"), " > 0) are not supported");
  c.dim = r.required_int("embedding_length", 1, k_max_width);
  c.n_layers = r.required_int("block_count", 1, k_max_layers);
  c.n_heads = r.required_int("attention.head_count", 1, k_max_heads);
  c.n_kv_heads = r.optional_int("attention.head_count_kv", c.n_heads, 1, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(f.path(), ": head_count ", c.n_heads, " is not a multiple of head_count_kv ", c.n_kv_heads);
  int64_t default_head_dim = c.dim % c.n_heads == 0 ? c.dim / c.n_heads : 0;
  c.head_dim = r.optional_int("attention.key_length", default_head_dim, 1, k_max_width);
  if (c.head_dim == 0)
    fail(f.path(), ": embedding_length ", c.dim, " is not a multiple of head_count ", c.n_heads, " and ",
         r.key("attention.key_length"), " is missing");
  c.head_dim_v = r.optional_int("attention.value_length", c.head_dim, 1, k_max_width);
  c.ffn_dim = r.required_int("feed_forward_length", 1, k_max_width);
  c.context_length = r.required_int("context_length", 1, k_max_context);
  auto eps = r.optional_float("attention.layer_norm_rms_epsilon");
  if (!eps) fail(f.path(), ": missing metadata key '", r.key("attention.layer_norm_rms_epsilon"), "'");
  if (!(*eps > 0 && *eps < 1)) fail(f.path(), ": ", r.key("attention.layer_norm_rms_epsilon"), " = ", *eps, " is not in (0, 1)");
  c.rms_eps = static_cast<float>(*eps);
  auto base = r.optional_float("rope.freq_base");
  c.rope_base = base ? static_cast<float>(*base) : 10000.f;
  if (!(c.rope_base > 1)) fail(f.path(), ": ", r.key("rope.freq_base"), " = ", c.rope_base, " must be > 1");
  c.rope_dims = r.optional_int("rope.dimension_count", c.head_dim, 2, c.head_dim);
  if (c.rope_dims % 2 != 0) fail(f.path(), ": ", r.key("rope.dimension_count"), " = ", c.rope_dims, " is odd");
  if (c.head_dim % 2 != 0) fail(f.path(), ": head dimension ", c.head_dim, " is odd (rotary embedding needs pairs)");

  // Rope scaling: "linear" divides positions by the factor; older files carry rope.scale_linear instead.
  std::string scaling = "none";
  if (auto s = f.get_string(r.key("rope.scaling.type"))) scaling = std::string(*s);
  auto factor = r.optional_float("rope.scaling.factor");
  if (scaling == "linear") {
    if (factor && *factor > 0) c.rope_scale = static_cast<float>(1.0 / *factor);
  } else if (scaling != "none") {
    fail(f.path(), ": rope scaling type '", scaling, "' is not supported (only none and linear)");
  } else if (auto legacy = r.optional_float("rope.scale_linear"); legacy && *legacy > 0) {
    c.rope_scale = static_cast<float>(1.0 / *legacy);
  }

  // ---- tensors ----
  TensorChecker t(f);
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail(f.path(), ": missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) fail(f.path(), ": tensor 'token_embd.weight' must be 2-D, has shape ", dims_string(embd->dims));
  c.vocab_size = static_cast<int64_t>(embd->dims[1]);
  if (auto v = f.get_int(r.key("vocab_size")); v && *v != c.vocab_size)
    fail(f.path(), ": ", r.key("vocab_size"), " = ", *v, " but token_embd.weight has ", c.vocab_size, " rows");
  // like llama.cpp, the token list and the embedding rows must agree (token ids index token_embd)
  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens");
      toks && toks->type == GgufType::ARRAY && toks->array_count != uint64_t(c.vocab_size))
    fail(f.path(), ": tokenizer.ggml.tokens has ", toks->array_count, " entries but token_embd.weight has ",
         c.vocab_size, " rows");
  const uint64_t dim = c.dim, vocab = c.vocab_size, ffn = c.ffn_dim;
  const uint64_t q_width = c.n_heads * c.head_dim, k_width = c.n_kv_heads * c.head_dim;
  const uint64_t v_width = c.n_kv_heads * c.head_dim_v, o_width = c.n_heads * c.head_dim_v;
  t.check("token_embd.weight", {dim, vocab}, true, false);
  t.check("output_norm.weight", {dim}, true, true);
  c.tied_embeddings = !t.check("output.weight", {dim, vocab}, false, false);
  c.rope_freq_factors = t.check("rope_freqs.weight", {uint64_t(c.rope_dims / 2)}, false, true);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    t.check(p + "attn_norm.weight", {dim}, true, true);
    t.check(p + "attn_q.weight", {dim, q_width}, true, false);
    t.check(p + "attn_k.weight", {dim, k_width}, true, false);
    t.check(p + "attn_v.weight", {dim, v_width}, true, false);
    t.check(p + "attn_output.weight", {o_width, dim}, true, false);
    // Q/K/V biases: required by qwen2, accepted on llama (llama.cpp loads them when present); qwen3 has none
    if (c.arch != Arch::Qwen3) {
      bool bias_required = c.arch == Arch::Qwen2;
      bool bq = t.check(p + "attn_q.bias", {q_width}, bias_required, true);
      bool bk = t.check(p + "attn_k.bias", {k_width}, bias_required, true);
      bool bv = t.check(p + "attn_v.bias", {v_width}, bias_required, true);
      if (l == 0) c.qkv_bias = bq;
      if (bq != c.qkv_bias || bk != c.qkv_bias || bv != c.qkv_bias)
        fail(f.path(), ": layer ", l, " has only some of the attn_q/k/v biases");
    }
    if (c.arch == Arch::Qwen3) {
      t.check(p + "attn_q_norm.weight", {uint64_t(c.head_dim)}, true, true);
      t.check(p + "attn_k_norm.weight", {uint64_t(c.head_dim)}, true, true);
      c.qk_norm = true;
    }
    t.check(p + "ffn_norm.weight", {dim}, true, true);
    t.check(p + "ffn_gate.weight", {dim, ffn}, true, false);
    t.check(p + "ffn_up.weight", {dim, ffn}, true, false);
    t.check(p + "ffn_down.weight", {ffn, dim}, true, false);
  }
  t.reject_unused();
  return c;
}

}  // namespace greta::model
