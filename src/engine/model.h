// The weights of a llama-family model as the engine sees them: ids into a weight table that every backend loads in
// the same order (so a plan built once works on any backend). Shapes are [rows, cols] with cols the row length
// (GGUF dims[0]); "(dim)" is a vector. Optional tensors are kNoWeight when the architecture has none.
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
  WeightId wq = kNoWeight;         // (n_heads * head_dim, dim)
  WeightId wk = kNoWeight;         // (n_kv_heads * head_dim, dim)
  WeightId wv = kNoWeight;         // (n_kv_heads * head_dim_v, dim)
  WeightId wo = kNoWeight;         // (dim, n_heads * head_dim_v)
  WeightId bq = kNoWeight;         // (n_heads * head_dim)            qwen2 only
  WeightId bk = kNoWeight;         // (n_kv_heads * head_dim)         qwen2 only
  WeightId bv = kNoWeight;         // (n_kv_heads * head_dim_v)       qwen2 only
  WeightId q_norm = kNoWeight;     // (head_dim)                      qwen3 only
  WeightId k_norm = kNoWeight;     // (head_dim)                      qwen3 only
  WeightId ffn_norm = kNoWeight;   // (dim)
  WeightId w_gate = kNoWeight;     // (ffn_dim, dim)
  WeightId w_up = kNoWeight;       // (ffn_dim, dim)
  WeightId w_down = kNoWeight;     // (dim, ffn_dim)
};

struct ModelWeights {
  WeightId token_embd = kNoWeight;   // (vocab, dim)
  std::vector<LayerWeights> layers;  // n_layers
  WeightId output_norm = kNoWeight;  // (dim)
  WeightId output = kNoWeight;       // (vocab, dim); == token_embd when the embeddings are tied
  WeightId rope_freqs = kNoWeight;   // (rope_dims / 2) rotary frequency divisors, Llama-3.1-style; optional
  std::vector<WeightDesc> table;     // indexed by WeightId: what Backend::load_weights receives

  uint64_t total_bytes() const;
};

// Finds every tensor the architecture needs in `file` and checks its type and shape against `config`; throws
// greta::Error naming a missing tensor, a wrong shape or an unsupported type. The descs point into `file`'s mapping.
ModelWeights map_weights(const model::GgufFile& file, const model::ModelConfig& config);

}  // namespace greta::engine
