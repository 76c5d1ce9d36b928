// Hyperparameters of a model, read from GGUF metadata ("{arch}.embedding_length", ...). One struct for every
// architecture: the differences are fields and flags, not subclasses. Which tensors an architecture has, and how
// they are checked and used, is its file's business (src/engine/arch/).
#pragma once
#include <cstdint>
#include <string>

namespace greta::model {

class GgufFile;

enum class Arch { Llama, Qwen2, Qwen3, Qwen3Moe, Gemma3, Phi3, GptOss };
// Rotary pairing: Adjacent rotates (x[2i], x[2i+1]) (llama.cpp's LLAMA_ROPE_TYPE_NORM, used by `llama`);
// NeoxHalves rotates (x[i], x[i + head_dim/2]) (LLAMA_ROPE_TYPE_NEOX: qwen2, qwen3).
enum class RopePairing { Adjacent, NeoxHalves };

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;      // general.architecture as written in the file
  std::string name;           // general.name, if any
  int64_t dim = 0;            // embedding_length: width of the residual stream
  int64_t n_layers = 0;       // block_count
  int64_t n_heads = 0;        // attention.head_count
  int64_t n_kv_heads = 0;     // attention.head_count_kv (== n_heads without GQA; 1 for MQA)
  int64_t head_dim = 0;       // attention.key_length, else dim / n_heads
  int64_t head_dim_v = 0;     // attention.value_length, else head_dim
  int64_t ffn_dim = 0;        // feed_forward_length
  int64_t vocab_size = 0;     // rows of token_embd.weight
  int64_t context_length = 0; // context_length (training context)
  float rms_eps = 1e-5f;      // attention.layer_norm_rms_epsilon
  float rope_base = 10000.f;  // rope.freq_base
  float rope_scale = 1.f;     // 1 / rope.scaling.factor for linear scaling (1 when none)
  int64_t rope_dims = 0;      // rope.dimension_count (== head_dim unless partial rotary)
  RopePairing rope_pairing = RopePairing::Adjacent;
  bool qkv_bias = false;      // qwen2: blk.N.attn_{q,k,v}.bias
  bool qk_norm = false;       // qwen3: blk.N.attn_{q,k}_norm.weight (per-head RMSNorm over head_dim)
  bool tied_embeddings = false;  // no output.weight: logits use token_embd.weight
  bool rope_freq_factors = false;  // rope_freqs.weight [rope_dims/2] present (Llama 3.1-style long-context rope):
                                   // each rotary frequency is divided by its factor

  // YaRN rope scaling (rope.scaling.type "yarn": gpt-oss): ggml_rope_ext's parameters. rope_scale is then
  // 1 / rope.scaling.factor as for linear scaling.
  bool rope_yarn = false;
  float yarn_attn_factor = 1.f;       // rope.scaling.attn_factor (1 when absent)
  float yarn_beta_fast = 32.f, yarn_beta_slow = 1.f;  // rope.scaling.yarn_beta_fast / _slow
  int64_t rope_ctx_orig = 0;          // rope.scaling.original_context_length, else context_length

  // Sliding-window attention (gemma3, gpt-oss): layer l sees only the last `sliding_window` positions when
  // layer_is_swa(l); such layers may have their own rope base. 0: every layer sees the whole sequence.
  int64_t sliding_window = 0;         // attention.sliding_window
  int64_t swa_period = 0;             // layer l is a sliding-window layer when l % swa_period < swa_period - 1
  float rope_base_swa = 0.f;          // rope.freq_base_swa (gemma3: else 10000; gpt-oss: else rope_base)
  float rope_scale_swa = 1.f;         // gemma3's linear rope scaling is for global layers only; gpt-oss: rope_scale
  bool layer_is_swa(int64_t l) const {
    return sliding_window > 0 && (swa_period <= 1 || l % swa_period < swa_period - 1);
  }

  // Mixture of experts (qwen3moe, gpt-oss): the FFN of every layer is n_experts experts of expert_ffn_dim, of which
  // each token uses n_experts_used.
  int64_t n_experts = 0;              // expert_count
  int64_t n_experts_used = 0;         // expert_used_count
  int64_t expert_ffn_dim = 0;         // expert_feed_forward_length

  float attn_scale = 0.f;             // attention logit scale: 1/sqrt(head_dim), or the architecture's own rule
  float embed_scale = 1.f;            // token embeddings are multiplied by it (gemma3: sqrt(dim))

  // Reads and validates the metadata and the tensor shapes it implies; throws greta::Error naming an unsupported
  // architecture, a missing key or a tensor whose shape disagrees.
  static ModelConfig from_gguf(const GgufFile& file);
};

const char* arch_name(Arch a);

}  // namespace greta::model
