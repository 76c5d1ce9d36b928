// ModelConfig::from_gguf: hyperparameters from "{arch}.*" metadata and the few flags the presence of a tensor
// decides (tied embeddings, Q/K/V biases, rope frequency factors). The tensors themselves are checked against these
// numbers by the architecture's file (src/engine/arch/), which knows which ones it reads.
#include "model/model_config.h"

#include <cmath>
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

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Qwen3Moe: return "qwen3moe";
    case Arch::Gemma3: return "gemma3";
    case Arch::Phi3: return "phi3";
    case Arch::GptOss: return "gpt-oss";
  }
  return "unknown";
}

namespace {

// The architecture named by general.architecture, with its fixed traits (rope pairing, Q/K norms).
void set_architecture(const GgufFile& f, ModelConfig& c) {
  struct Known {
    const char* name;
    Arch arch;
    RopePairing pairing;
    bool qk_norm;
  };
  static constexpr Known kKnown[] = {
      {"llama", Arch::Llama, RopePairing::Adjacent, false},
      {"qwen2", Arch::Qwen2, RopePairing::NeoxHalves, false},
      {"qwen3", Arch::Qwen3, RopePairing::NeoxHalves, true},
      {"qwen3moe", Arch::Qwen3Moe, RopePairing::NeoxHalves, true},
      {"gemma3", Arch::Gemma3, RopePairing::NeoxHalves, true},
      {"phi3", Arch::Phi3, RopePairing::NeoxHalves, false},
      {"gpt-oss", Arch::GptOss, RopePairing::NeoxHalves, false},
  };
  std::string supported;
  for (const Known& k : kKnown) {
    supported += cat(supported.empty() ? "" : ", ", k.name);
    if (c.arch_name != k.name) continue;
    c.arch = k.arch;
    c.rope_pairing = k.pairing;
    c.qk_norm = k.qk_norm;
    return;
  }
  fail(f.path(), ": unsupported architecture '", c.arch_name, "' (supported: ", supported, ")");
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) fail(f.path(), ": missing metadata key 'general.architecture'");
  c.arch_name = std::string(*arch);
  set_architecture(f, c);
  if (auto n = f.get_string("general.name")) c.name = std::string(*n);

  Reader r{f, c.arch_name + "."};
  const bool moe = c.arch == Arch::Qwen3Moe || c.arch == Arch::GptOss;
  c.n_experts = r.optional_int("expert_count", 0, 0, k_max_heads);
  if (c.n_experts > 0 && !moe)
    fail(f.path(), ": ", r.key("expert_count"), " = ", c.n_experts, ", but ", c.arch_name,
         " has no mixture-of-experts layers (supported for qwen3moe and gpt-oss)");
  if (moe) {
    c.n_experts = r.required_int("expert_count", 1, k_max_heads);
    c.n_experts_used = r.required_int("expert_used_count", 1, c.n_experts);
    c.expert_ffn_dim = r.required_int("expert_feed_forward_length", 1, k_max_width);
  }
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
  // MoE models may leave the dense FFN width out (gpt-oss writes it, unused).
  c.ffn_dim = moe ? r.optional_int("feed_forward_length", c.expert_ffn_dim, 1, k_max_width)
                  : r.required_int("feed_forward_length", 1, k_max_width);
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
  c.rope_ctx_orig = r.optional_int("rope.scaling.original_context_length", c.context_length, 1, k_max_context);

  // Rope scaling: "linear" divides positions by the factor (older files carry rope.scale_linear instead); "yarn"
  // blends scaled and unscaled frequencies (RopeOp).
  std::string scaling = "none";
  if (auto s = f.get_string(r.key("rope.scaling.type"))) scaling = std::string(*s);
  auto factor = r.optional_float("rope.scaling.factor");
  // "longrope" (phi3) scales through its factor tensors, not the positions.
  if (scaling == "longrope") {
  } else if (scaling == "linear" || scaling == "yarn") {
    if (factor && *factor > 0) c.rope_scale = static_cast<float>(1.0 / *factor);
    c.rope_yarn = scaling == "yarn";
  } else if (scaling != "none") {
    fail(f.path(), ": rope scaling type '", scaling, "' is not supported (none, linear, yarn and longrope are)");
  } else if (auto legacy = r.optional_float("rope.scale_linear"); legacy && *legacy > 0) {
    c.rope_scale = static_cast<float>(1.0 / *legacy);
  }
  if (auto af = r.optional_float("rope.scaling.attn_factor"); af && *af > 0) c.yarn_attn_factor = float(*af);
  if (auto bf = r.optional_float("rope.scaling.yarn_beta_fast")) c.yarn_beta_fast = float(*bf);
  if (auto bs = r.optional_float("rope.scaling.yarn_beta_slow")) c.yarn_beta_slow = float(*bs);

  // Sliding-window layers: gemma3 every layer but each sixth, gpt-oss every other one (llama.cpp's patterns, or the
  // file's attention.sliding_window_pattern). phi3 files carry a window that llama.cpp does not apply: neither do we.
  if (c.arch == Arch::Gemma3 || c.arch == Arch::GptOss) {
    c.sliding_window = r.optional_int("attention.sliding_window", 0, 0, k_max_context);
    c.swa_period = r.optional_int("attention.sliding_window_pattern", c.arch == Arch::Gemma3 ? 6 : 2, 1, k_max_layers);
    auto base_swa = r.optional_float("rope.freq_base_swa");
    c.rope_base_swa = base_swa ? float(*base_swa) : c.arch == Arch::Gemma3 ? 10000.f : c.rope_base;
    c.rope_scale_swa = c.arch == Arch::Gemma3 ? 1.f : c.rope_scale;
  }
  c.attn_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  if (c.arch == Arch::Gemma3) {
    c.embed_scale = float(std::sqrt(double(c.dim)));
    if (c.n_layers == 62) c.attn_scale = float(1.0 / std::sqrt(double(c.dim / c.n_heads)));  // gemma3 27B's rule
  }

  // ---- what the tensors decide ----
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail(f.path(), ": missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2) fail(f.path(), ": tensor 'token_embd.weight' must be 2-D, has shape ", dims_string(embd->dims));
  c.vocab_size = static_cast<int64_t>(embd->dims[1]);
  if (c.vocab_size < 1 || c.vocab_size > k_max_width * 64)
    fail(f.path(), ": token_embd.weight has ", c.vocab_size, " rows");
  if (auto v = f.get_int(r.key("vocab_size")); v && *v != c.vocab_size)
    fail(f.path(), ": ", r.key("vocab_size"), " = ", *v, " but token_embd.weight has ", c.vocab_size, " rows");
  // like llama.cpp, the token list and the embedding rows must agree (token ids index token_embd)
  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens");
      toks && toks->type == GgufType::ARRAY && toks->array_count != uint64_t(c.vocab_size))
    fail(f.path(), ": tokenizer.ggml.tokens has ", toks->array_count, " entries but token_embd.weight has ",
         c.vocab_size, " rows");
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.rope_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;
  c.qkv_bias = c.arch == Arch::Qwen2 || c.arch == Arch::GptOss || f.find_tensor("blk.0.attn_q.bias") != nullptr;
  return c;
}

}  // namespace greta::model
