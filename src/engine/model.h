// The weights of a model as the engine sees them: ids into a weight table that every backend loads in the same
// order (so a plan built once works on any backend). Shapes are [rows, cols] with cols the row length (GGUF
// dims[0]); "(dim)" is a vector. One struct for every architecture: a tensor the architecture does not have is
// kNoWeight. The architecture's file (src/engine/arch/) fills it and builds the plan that uses it.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/plan.h"

namespace greta::model {
class GgufFile;
struct ModelConfig;
}  // namespace greta::model

namespace greta::engine {

struct LayerWeights {
  WeightId attn_norm = kNoWeight;  // (dim)
  WeightId wq = kNoWeight;         // (n_heads * head_dim, dim)       phi3: rows of attn_qkv
  WeightId wk = kNoWeight;         // (n_kv_heads * head_dim, dim)
  WeightId wv = kNoWeight;         // (n_kv_heads * head_dim_v, dim)
  WeightId wo = kNoWeight;         // (dim, n_heads * head_dim_v)
  WeightId bq = kNoWeight;         // (n_heads * head_dim)            qwen2, gpt-oss
  WeightId bk = kNoWeight;         // (n_kv_heads * head_dim)         qwen2, gpt-oss
  WeightId bv = kNoWeight;         // (n_kv_heads * head_dim_v)       qwen2, gpt-oss
  WeightId bo = kNoWeight;         // (dim)                           gpt-oss
  WeightId q_norm = kNoWeight;     // (head_dim)                      qwen3, qwen3moe, gemma3
  WeightId k_norm = kNoWeight;     // (head_dim)                      qwen3, qwen3moe, gemma3
  WeightId attn_sinks = kNoWeight; // (n_heads)                       gpt-oss
  WeightId attn_post_norm = kNoWeight;  // (dim) on the attention output before the residual   gemma3
  WeightId ffn_norm = kNoWeight;   // (dim)                           gpt-oss: its post_attention_norm
  WeightId ffn_post_norm = kNoWeight;   // (dim) on the FFN output before the residual         gemma3
  // Dense FFN
  WeightId w_gate = kNoWeight;     // (ffn_dim, dim)                  phi3: rows of the fused ffn_up
  WeightId w_up = kNoWeight;       // (ffn_dim, dim)
  WeightId w_down = kNoWeight;     // (dim, ffn_dim)
  // Mixture of experts (expert e's rows follow expert e-1's: MoeMatMulOp)
  WeightId router = kNoWeight;          // (n_experts, dim) F32
  WeightId router_bias = kNoWeight;     // (n_experts)                          gpt-oss
  WeightId gate_exps = kNoWeight;       // (n_experts * expert_ffn_dim, dim)
  WeightId up_exps = kNoWeight;         // (n_experts * expert_ffn_dim, dim)
  WeightId down_exps = kNoWeight;       // (n_experts * dim, expert_ffn_dim)
  WeightId gate_exps_bias = kNoWeight;  // (n_experts, expert_ffn_dim)          gpt-oss
  WeightId up_exps_bias = kNoWeight;    // (n_experts, expert_ffn_dim)          gpt-oss
  WeightId down_exps_bias = kNoWeight;  // (n_experts, dim)                     gpt-oss
};

struct ModelWeights {
  WeightId token_embd = kNoWeight;   // (vocab, dim)
  std::vector<LayerWeights> layers;  // n_layers
  WeightId output_norm = kNoWeight;  // (dim)
  WeightId output = kNoWeight;       // (vocab, dim); == token_embd when the embeddings are tied
  WeightId rope_freqs = kNoWeight;   // (rope_dims / 2) rotary frequency divisors, Llama-3.1-style; optional
  WeightId rope_long = kNoWeight;    // (rope_dims / 2) phi3 LongRoPE divisors past the original context; optional
  WeightId rope_short = kNoWeight;   // (rope_dims / 2) phi3 LongRoPE divisors within it; optional
  std::vector<WeightDesc> table;     // indexed by WeightId: what Backend::load_weights receives

  uint64_t total_bytes() const;
};

// Finds every tensor the architecture needs in `file` and checks its type and shape against `config`; throws
// greta::Error naming a missing, misshapen, unsupported or unexpected tensor. The descs point into `file`'s mapping.
// The architecture's file does the work (src/engine/arch/).
ModelWeights map_weights(const model::GgufFile& file, const model::ModelConfig& config);

}  // namespace greta::engine
