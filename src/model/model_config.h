// Hyperparameters of a llama-family model, read from GGUF metadata ("{arch}.embedding_length", ...), and the names
// of its tensors. One struct for llama / qwen2 / qwen3: the differences are flags, not subclasses.
#pragma once
#include <cstdint>
#include <string>

namespace greta::model {

class GgufFile;

enum class Arch { Llama, Qwen2, Qwen3 };
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

  // Reads and validates the metadata and the tensor shapes it implies; throws greta::Error naming an unsupported
  // architecture, a missing key or a tensor whose shape disagrees.
  static ModelConfig from_gguf(const GgufFile& file);
};

const char* arch_name(Arch a);

}  // namespace greta::model
