// The pieces every architecture's plan is made of (engine/plan.h has the ops): the step inputs, the embedding, the
// attention block, the FFN variants (dense GLU, mixture of experts) and the output head. An architecture's file
// (llama.cpp, gemma3.cpp, ...) calls them in its forward order with its own settings; a piece adds ops and the
// scratch buffers it needs, and knows nothing of which architecture calls it.
#pragma once
#include <cstdint>
#include <string>

#include "engine/arch/weight_mapper.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "model/model_config.h"

namespace greta::engine::arch {

// Rotary embedding of one layer (RopeOp).
struct RopeParams {
  float base = 10000.f, scale = 1.f;
  WeightId freq_factors = kNoWeight;
  float ext_factor = 0.f, attn_factor = 1.f, yarn_low = 0.f, yarn_high = 0.f;
};

// What a layer's attention does beyond the config's shapes.
struct AttentionParams {
  RopeParams rope;
  int64_t window = 0;  // sliding window (AttentionOp::window); 0: whole sequence
  float scale = 0.f;   // logit scale
};

// A mixture-of-experts FFN's routing and activation.
struct MoeParams {
  MoeGating gating = MoeGating::SoftmaxTopK;
  bool normalize = false;
  GluKind glu = GluKind::SiLU;
};

// ---- tensors: the parts of LayerWeights / ModelWeights each piece reads --------------------------------------------

enum class Presence { None, Optional, Required };

// Checks the config's dimensions, sizes w.layers, and maps token_embd, output_norm, output (absent: tied to
// token_embd) and rope_freqs (optional).
void map_embeddings_and_head(const model::GgufFile& file, WeightMapper& m, const model::ModelConfig& c,
                             ModelWeights& w);

struct AttentionTensors {
  Presence qkv_bias = Presence::Optional;  // attn_{q,k,v}.bias (llama.cpp loads them on llama when present)
  bool qk_norm = false;                    // attn_{q,k}_norm.weight
  bool fused_qkv = false;                  // one attn_qkv.weight: Q, K then V rows (phi3)
  bool output_bias = false;                // attn_output.bias (gpt-oss)
  bool sinks = false;                      // attn_sinks.weight (gpt-oss)
  bool post_norm = false;                  // post_attention_norm.weight on the attention output (gemma3)
};
void map_attention(WeightMapper& m, const model::ModelConfig& c, int64_t l, LayerWeights& L,
                   const AttentionTensors& t);

// ffn_norm, ffn_gate, ffn_up, ffn_down; fused_gate_up: one ffn_up of 2 * ffn_dim rows, gate rows first (phi3);
// post_norm: post_ffw_norm.weight (gemma3).
void map_dense_ffn(WeightMapper& m, const model::ModelConfig& c, int64_t l, LayerWeights& L, bool fused_gate_up,
                   bool post_norm);
// ffn_gate_inp (the router, F32) and the three expert tensors; biases: gpt-oss's router and expert biases.
// norm_name: the FFN's input norm (gpt-oss calls it post_attention_norm).
void map_moe_ffn(WeightMapper& m, const model::ModelConfig& c, int64_t l, LayerWeights& L, bool biases,
                 const char* norm_name = "ffn_norm");

// The tensors of a decoder (build_decoder's model): what map_attention and the FFN mapping read per layer.
struct FfnTensors {
  bool moe = false;            // map_moe_ffn, else map_dense_ffn
  bool fused_gate_up = false;  // dense: phi3's one ffn_up
  bool post_norm = false;      // dense: gemma3's post_ffw_norm
  bool moe_biases = false;     // moe: gpt-oss's router and expert biases
  const char* norm_name = "ffn_norm";
};
struct DecoderTensors {
  AttentionTensors attention;
  FfnTensors ffn;
  bool longrope_factors = false;  // rope_factors_long / _short (phi3), optional
};
ModelWeights map_decoder(const model::GgufFile& file, const model::ModelConfig& c, const DecoderTensors& t);

// ---- the plan ---------------------------------------------------------------------------------------------------

class PlanBuilder {
public:
  // Checks the shape against the config and declares the step inputs, the residual stream and the logits.
  PlanBuilder(const model::ModelConfig& config, const ModelWeights& weights, const PlanShape& shape);

  // The rope of layer l from the config: base and scale (the sliding-window layers' own, if any), YaRN, the
  // frequency factors (rope_freqs, or phi3's long/short factors chosen by the plan's context).
  RopeParams rope_for_layer(int64_t l) const;
  // Rope, window and scale of layer l from the config.
  AttentionParams attention_for_layer(int64_t l) const;

  void embed(float scale);                       // x = scale * token_embd[tokens]
  // Labels "blk.l.*" and the layer's KV caches: in the sliding-window pool for a sliding-window layer when the
  // layout has one, else in the shared pool.
  void begin_layer(int64_t l);
  // x += post_norm(wo . attention(rope(qk_norm(norm(x) . wq + bq)), ...) + bo): every optional weight of
  // LayerWeights that is present takes part.
  void attention(const LayerWeights& L, const AttentionParams& p);
  // x += post_norm(w_down . glu(norm(x) . w_gate, norm(x) . w_up)).
  void dense_ffn(const LayerWeights& L, GluKind glu);
  // x += sum over the token's experts e of weight_e * (down_e . glu(gate_e . norm(x), up_e . norm(x))), with the
  // experts' biases where present.
  void moe_ffn(const LayerWeights& L, const MoeParams& p);
  // Final norm and logits (of every token, or of the step's logit rows).
  Plan finish();

private:
  BufferId scratch(const std::string& name, int64_t elems, ElemType type = ElemType::F32);
  void op(const std::string& label, OpVariant v);

  const model::ModelConfig& c_;
  const ModelWeights& w_;
  Plan plan_;
  int64_t n_ = 0;          // tokens per step
  int layer_ = -1;
  std::string prefix_;
  BufferId kv_rows_ = kNoBuffer, seq_ = kNoBuffer, pages_ = kNoBuffer, logit_rows_ = kNoBuffer;
  BufferId x_ = kNoBuffer, xb_ = kNoBuffer;  // residual stream; normed input / sublayer output
  BufferId kv_rows_swa_ = kNoBuffer, pages_swa_ = kNoBuffer;  // the sliding-window pool's (KvLayout::n_pages_swa)
  // The current layer's caches and how they are addressed (its pool's rows, KV rows and page table).
  BufferId k_cache_ = kNoBuffer, v_cache_ = kNoBuffer, layer_kv_rows_ = kNoBuffer, layer_pages_ = kNoBuffer;
  int64_t layer_cache_rows_ = 0;
};

// The decoder every architecture here is: embed (times the config's embed_scale), then per layer the attention
// block (rope, window and scale from the config) and a dense GLU FFN, or the mixture of experts where the layer
// has a router; then the head.
struct DecoderParams {
  GluKind glu = GluKind::SiLU;  // the dense FFN's
  MoeParams moe;
};
Plan build_decoder(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape, const DecoderParams& p);

}  // namespace greta::engine::arch
