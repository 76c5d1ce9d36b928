#include "engine/model.h"

#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace greta::engine {

using model::GgmlType;

uint64_t ModelWeights::total_bytes() const {
  uint64_t bytes = 0;
  for (const auto& w : table) bytes += w.bytes;
  // A tied output matrix is the embedding table itself: it is in the table once.
  return bytes;
}

namespace {

class WeightMapper {
public:
  WeightMapper(const model::GgufFile& file, ModelWeights& weights) : file_(file), weights_(weights) {}

  // Adds tensor `name` with the expected shape (rows = 1 for a vector); kNoWeight when absent and optional.
  WeightId add(const std::string& name, int64_t rows, int64_t cols, bool required) {
    const model::GgufTensor* t = file_.find_tensor(name);
    if (!t) {
      if (required) fail(file_.path(), ": tensor ", name, " is missing");
      return kNoWeight;
    }
    const auto& tr = model::traits(t->type);
    if (!tr.supported) fail(file_.path(), ": tensor ", name, " has unsupported type ", tr.name);
    const bool is_vector = rows == 1;
    const bool shape_ok = is_vector ? (t->dims.size() == 1 && int64_t(t->dims[0]) == cols)
                                    : (t->dims.size() == 2 && int64_t(t->dims[0]) == cols &&
                                       int64_t(t->dims[1]) == rows);
    if (!shape_ok) {
      std::string dims;
      for (size_t i = 0; i < t->dims.size(); ++i) dims += cat(i ? ", " : "", t->dims[i]);
      fail(file_.path(), ": tensor ", name, " has shape [", dims, "], expected [", cols,
           is_vector ? std::string() : cat(", ", rows), "]");
    }
    if (cols % tr.block_elems != 0)
      fail(file_.path(), ": tensor ", name, " row length ", cols, " is not a multiple of the ", tr.name,
           " block size ", tr.block_elems);
    WeightDesc desc;
    desc.name = std::string(t->name);
    desc.type = t->type;
    desc.rows = rows;
    desc.cols = cols;
    desc.data = t->data;
    desc.bytes = t->n_bytes;
    GRETA_CHECK(desc.bytes == model::row_bytes(t->type, uint64_t(cols)) * uint64_t(rows), name);
    weights_.table.push_back(std::move(desc));
    return WeightId(weights_.table.size() - 1);
  }

private:
  const model::GgufFile& file_;
  ModelWeights& weights_;
};

}  // namespace

ModelWeights map_weights(const model::GgufFile& file, const model::ModelConfig& c) {
  if (c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
      c.head_dim_v <= 0 || c.ffn_dim <= 0 || c.vocab_size <= 0)
    fail(file.path(), ": model has a non-positive dimension (dim ", c.dim, ", layers ", c.n_layers, ", heads ",
         c.n_heads, "/", c.n_kv_heads, ", head dim ", c.head_dim, ", ffn ", c.ffn_dim, ", vocab ", c.vocab_size, ")");
  if (c.n_heads % c.n_kv_heads != 0)
    fail(file.path(), ": ", c.n_heads, " attention heads are not a multiple of ", c.n_kv_heads, " KV heads");

  ModelWeights w;
  WeightMapper m(file, w);
  const int64_t q_dim = c.n_heads * c.head_dim, k_dim = c.n_kv_heads * c.head_dim;
  const int64_t v_dim = c.n_kv_heads * c.head_dim_v, o_dim = c.n_heads * c.head_dim_v;

  w.token_embd = m.add("token_embd.weight", c.vocab_size, c.dim, true);
  w.layers.resize(size_t(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = cat("blk.", l, ".");
    LayerWeights& L = w.layers[size_t(l)];
    L.attn_norm = m.add(p + "attn_norm.weight", 1, c.dim, true);
    L.wq = m.add(p + "attn_q.weight", q_dim, c.dim, true);
    L.wk = m.add(p + "attn_k.weight", k_dim, c.dim, true);
    L.wv = m.add(p + "attn_v.weight", v_dim, c.dim, true);
    L.wo = m.add(p + "attn_output.weight", c.dim, o_dim, true);
    // Biases: required where the architecture defines them (qwen2), used when present otherwise (as llama.cpp).
    L.bq = m.add(p + "attn_q.bias", 1, q_dim, c.qkv_bias);
    L.bk = m.add(p + "attn_k.bias", 1, k_dim, c.qkv_bias);
    L.bv = m.add(p + "attn_v.bias", 1, v_dim, c.qkv_bias);
    if (c.qk_norm) {
      L.q_norm = m.add(p + "attn_q_norm.weight", 1, c.head_dim, true);
      L.k_norm = m.add(p + "attn_k_norm.weight", 1, c.head_dim, true);
    }
    L.ffn_norm = m.add(p + "ffn_norm.weight", 1, c.dim, true);
    L.w_gate = m.add(p + "ffn_gate.weight", c.ffn_dim, c.dim, true);
    L.w_up = m.add(p + "ffn_up.weight", c.ffn_dim, c.dim, true);
    L.w_down = m.add(p + "ffn_down.weight", c.dim, c.ffn_dim, true);
  }
  w.output_norm = m.add("output_norm.weight", 1, c.dim, true);
  w.output = m.add("output.weight", c.vocab_size, c.dim, false);
  if (w.output == kNoWeight) w.output = w.token_embd;  // tied embeddings
  const int64_t rope_dims = c.rope_dims > 0 ? c.rope_dims : c.head_dim;
  w.rope_freqs = m.add("rope_freqs.weight", 1, rope_dims / 2, c.rope_freq_factors);
  return w;
}

}  // namespace greta::engine
