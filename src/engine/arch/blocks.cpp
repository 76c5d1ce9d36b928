#include "engine/arch/blocks.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "model/gguf.h"

namespace greta::engine::arch {

namespace {

// ggml_rope_yarn_corr_dims: the rotary dimensions where YaRN's blend of scaled and unscaled angles starts and ends
// (the ones that turn fewer than beta_fast and more than beta_slow times over the original context).
void yarn_corr_dims(int64_t rope_dims, int64_t ctx_orig, float base, float beta_fast, float beta_slow, float& low,
                    float& high) {
  auto corr_dim = [&](float n_rot) {
    return float(rope_dims) * std::log(float(ctx_orig) / (n_rot * 2 * float(M_PI))) / (2 * std::log(base));
  };
  low = std::max(0.f, std::floor(corr_dim(beta_fast)));
  high = std::min(float(rope_dims - 1), std::ceil(corr_dim(beta_slow)));
}

}  // namespace

void map_embeddings_and_head(const model::GgufFile& file, WeightMapper& m, const model::ModelConfig& c,
                             ModelWeights& w) {
  if (c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
      c.head_dim_v <= 0 || c.ffn_dim <= 0 || c.vocab_size <= 0)
    fail(file.path(), ": model has a non-positive dimension (dim ", c.dim, ", layers ", c.n_layers, ", heads ",
         c.n_heads, "/", c.n_kv_heads, ", head dim ", c.head_dim, ", ffn ", c.ffn_dim, ", vocab ", c.vocab_size, ")");
  if (c.n_heads % c.n_kv_heads != 0)
    fail(file.path(), ": ", c.n_heads, " attention heads are not a multiple of ", c.n_kv_heads, " KV heads");
  w.layers.resize(size_t(c.n_layers));
  w.token_embd = m.matrix("token_embd.weight", c.vocab_size, c.dim);
  w.output_norm = m.vector("output_norm.weight", c.dim);
  w.output = m.matrix("output.weight", c.vocab_size, c.dim, false);
  if (w.output == kNoWeight) w.output = w.token_embd;  // tied embeddings
  const int64_t rope_dims = c.rope_dims > 0 ? c.rope_dims : c.head_dim;
  w.rope_freqs = m.vector("rope_freqs.weight", rope_dims / 2, false);
}

void map_attention(WeightMapper& m, const model::ModelConfig& c, int64_t l, LayerWeights& L,
                   const AttentionTensors& t) {
  const std::string p = cat("blk.", l, ".");
  const int64_t q_dim = c.n_heads * c.head_dim, k_dim = c.n_kv_heads * c.head_dim;
  const int64_t v_dim = c.n_kv_heads * c.head_dim_v, o_dim = c.n_heads * c.head_dim_v;
  L.attn_norm = m.vector(p + "attn_norm.weight", c.dim);
  if (t.fused_qkv) {
    const std::string qkv = p + "attn_qkv.weight";
    const int64_t rows = q_dim + k_dim + v_dim;
    L.wq = m.row_slice(qkv, rows, c.dim, 0, q_dim, "q");
    L.wk = m.row_slice(qkv, rows, c.dim, q_dim, k_dim, "k");
    L.wv = m.row_slice(qkv, rows, c.dim, q_dim + k_dim, v_dim, "v");
  } else {
    L.wq = m.matrix(p + "attn_q.weight", q_dim, c.dim);
    L.wk = m.matrix(p + "attn_k.weight", k_dim, c.dim);
    L.wv = m.matrix(p + "attn_v.weight", v_dim, c.dim);
  }
  L.wo = m.matrix(p + "attn_output.weight", c.dim, o_dim);
  if (t.qkv_bias != Presence::None) {
    const bool required = t.qkv_bias == Presence::Required;
    L.bq = m.vector(p + "attn_q.bias", q_dim, required);
    L.bk = m.vector(p + "attn_k.bias", k_dim, required);
    L.bv = m.vector(p + "attn_v.bias", v_dim, required);
    const bool any = L.bq != kNoWeight || L.bk != kNoWeight || L.bv != kNoWeight;
    if (any && (L.bq == kNoWeight || L.bk == kNoWeight || L.bv == kNoWeight))
      fail("layer ", l, " has only some of the attn_q/k/v biases");
  }
  if (t.qk_norm) {
    L.q_norm = m.vector(p + "attn_q_norm.weight", c.head_dim);
    L.k_norm = m.vector(p + "attn_k_norm.weight", c.head_dim);
  }
  if (t.output_bias) L.bo = m.vector(p + "attn_output.bias", c.dim);
  if (t.sinks) L.attn_sinks = m.vector(p + "attn_sinks.weight", c.n_heads);
  if (t.post_norm) L.attn_post_norm = m.vector(p + "post_attention_norm.weight", c.dim);
}

void map_dense_ffn(WeightMapper& m, const model::ModelConfig& c, int64_t l, LayerWeights& L, bool fused_gate_up,
                   bool post_norm) {
  const std::string p = cat("blk.", l, ".");
  L.ffn_norm = m.vector(p + "ffn_norm.weight", c.dim);
  if (fused_gate_up) {
    const std::string up = p + "ffn_up.weight";
    L.w_gate = m.row_slice(up, 2 * c.ffn_dim, c.dim, 0, c.ffn_dim, "gate");
    L.w_up = m.row_slice(up, 2 * c.ffn_dim, c.dim, c.ffn_dim, c.ffn_dim, "up");
  } else {
    L.w_gate = m.matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim);
    L.w_up = m.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim);
  }
  L.w_down = m.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
  if (post_norm) L.ffn_post_norm = m.vector(p + "post_ffw_norm.weight", c.dim);
}

void map_moe_ffn(WeightMapper& m, const model::ModelConfig& c, int64_t l, LayerWeights& L, bool biases,
                 const char* norm_name) {
  const std::string p = cat("blk.", l, ".");
  const int64_t E = c.n_experts, ffn = c.expert_ffn_dim;
  L.ffn_norm = m.vector(p + norm_name + ".weight", c.dim);
  L.router = m.matrix(p + "ffn_gate_inp.weight", E, c.dim);
  L.gate_exps = m.experts(p + "ffn_gate_exps.weight", E, ffn, c.dim);
  L.up_exps = m.experts(p + "ffn_up_exps.weight", E, ffn, c.dim);
  L.down_exps = m.experts(p + "ffn_down_exps.weight", E, c.dim, ffn);
  if (biases) {
    L.router_bias = m.vector(p + "ffn_gate_inp.bias", E);
    L.gate_exps_bias = m.vectors(p + "ffn_gate_exps.bias", E, ffn);
    L.up_exps_bias = m.vectors(p + "ffn_up_exps.bias", E, ffn);
    L.down_exps_bias = m.vectors(p + "ffn_down_exps.bias", E, c.dim);
  }
}

ModelWeights map_decoder(const model::GgufFile& file, const model::ModelConfig& c, const DecoderTensors& t) {
  ModelWeights w;
  WeightMapper m(file, w);
  map_embeddings_and_head(file, m, c, w);
  if (t.longrope_factors) {
    const int64_t half = (c.rope_dims > 0 ? c.rope_dims : c.head_dim) / 2;
    w.rope_long = m.vector("rope_factors_long.weight", half, false);
    w.rope_short = m.vector("rope_factors_short.weight", half, false);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    map_attention(m, c, l, L, t.attention);
    if (t.ffn.moe) map_moe_ffn(m, c, l, L, t.ffn.moe_biases, t.ffn.norm_name);
    else map_dense_ffn(m, c, l, L, t.ffn.fused_gate_up, t.ffn.post_norm);
  }
  m.finish();
  return w;
}

PlanBuilder::PlanBuilder(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape)
    : c_(c), w_(w), n_(shape.n_tokens) {
  const int64_t n = n_;
  const KvLayout& kv = shape.kv;
  if (n <= 0) fail("plan: ", n, " tokens per step (need at least 1)");
  if (shape.n_seqs < 1 || shape.n_logit_rows < 1 || shape.n_logit_rows > n)
    fail("plan: ", shape.n_seqs, " sequences and ", shape.n_logit_rows, " logit rows for a step of ", n, " tokens");
  if (kv.page_size < 1 || kv.pages_per_seq < 1 || kv.n_pages < 2)
    fail("plan: KV layout of ", kv.n_pages, " pages of ", kv.page_size, " (", kv.pages_per_seq, " per sequence)");
  if (kv.type != ElemType::F32 && kv.type != ElemType::F16 && kv.type != ElemType::Q8_0)
    fail("plan: KV cache type ", elem_type_name(kv.type));
  if (kv.type == ElemType::Q8_0 && ((c.n_kv_heads * c.head_dim) % 32 != 0 || (c.n_kv_heads * c.head_dim_v) % 32 != 0))
    fail("a q8_0 KV cache needs K and V rows of a multiple of 32 elements; this model's are ", c.n_kv_heads * c.head_dim,
         " and ", c.n_kv_heads * c.head_dim_v, " (use --kv-type f16)");
  if (int64_t(w.layers.size()) != c.n_layers) fail("plan: weights have ", w.layers.size(), " layers, config ", c.n_layers);
  const int64_t rope_dims = c.rope_dims > 0 ? c.rope_dims : c.head_dim;
  if (rope_dims > c.head_dim || rope_dims % 2 != 0)
    fail("plan: rope dimension count ", rope_dims, " must be even and at most the head size ", c.head_dim);
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    fail("plan: ", c.n_heads, " heads are not a multiple of ", c.n_kv_heads, " KV heads");

  plan_.shape = shape;
  plan_.vocab = c.vocab_size;
  plan_.n_logit_rows = shape.n_logit_rows;
  plan_.tokens = plan_.add_buffer("inp_tokens", ElemType::I32, BufferRole::Tokens, n);
  plan_.positions = plan_.add_buffer("inp_pos", ElemType::I32, BufferRole::Positions, n);
  kv_rows_ = plan_.add_buffer("inp_kv_rows", ElemType::I32, BufferRole::KvRows, n);
  seq_ = plan_.add_buffer("inp_seq", ElemType::I32, BufferRole::SeqIndex, n);
  pages_ = plan_.add_buffer("inp_pages", ElemType::I32, BufferRole::PageTable, shape.n_seqs * kv.pages_per_seq);
  if (kv.n_pages_swa > 0) {
    if (kv.n_pages_swa < 2) fail("plan: a sliding-window pool of ", kv.n_pages_swa, " pages");
    kv_rows_swa_ = plan_.add_buffer("inp_kv_rows_swa", ElemType::I32, BufferRole::KvRowsSwa, n);
    pages_swa_ =
        plan_.add_buffer("inp_pages_swa", ElemType::I32, BufferRole::PageTableSwa, shape.n_seqs * kv.pages_per_seq);
  }
  if (shape.n_logit_rows < n)
    logit_rows_ = plan_.add_buffer("inp_logit_rows", ElemType::I32, BufferRole::LogitRows, shape.n_logit_rows);
  x_ = scratch("x", n * c.dim);
  xb_ = scratch("xb", n * c.dim);
  plan_.logits = plan_.add_buffer("logits", ElemType::F32, BufferRole::Logits, plan_.n_logit_rows * c.vocab_size);
}

BufferId PlanBuilder::scratch(const std::string& name, int64_t elems, ElemType type) {
  for (size_t i = 0; i < plan_.buffers.size(); ++i)
    if (plan_.buffers[i].name == name) {
      GRETA_CHECK(plan_.buffers[i].elems == elems, "plan buffer ", name, " declared with two sizes");
      return BufferId(i);
    }
  return plan_.add_buffer(name, type, BufferRole::Scratch, elems);
}

void PlanBuilder::op(const std::string& label, OpVariant v) {
  plan_.ops.push_back({prefix_ + label, layer_, std::move(v)});
}

RopeParams PlanBuilder::rope_for_layer(int64_t l) const {
  RopeParams r;
  const bool swa = c_.layer_is_swa(l);
  r.base = swa ? c_.rope_base_swa : c_.rope_base;
  r.scale = swa ? c_.rope_scale_swa : c_.rope_scale;
  r.freq_factors = w_.rope_freqs;
  // phi3's LongRoPE: the long factors when the context a sequence may reach is past the original one.
  if (w_.rope_long != kNoWeight || w_.rope_short != kNoWeight) {
    const int64_t ctx = plan_.shape.kv.pages_per_seq * plan_.shape.kv.page_size;
    r.freq_factors = ctx > c_.rope_ctx_orig && w_.rope_long != kNoWeight ? w_.rope_long : w_.rope_short;
  }
  r.attn_factor = c_.yarn_attn_factor;
  if (c_.rope_yarn && r.scale != 1.f) {
    r.ext_factor = 1.f;
    yarn_corr_dims(c_.rope_dims, c_.rope_ctx_orig, r.base, c_.yarn_beta_fast, c_.yarn_beta_slow, r.yarn_low,
                   r.yarn_high);
  }
  return r;
}

AttentionParams PlanBuilder::attention_for_layer(int64_t l) const {
  AttentionParams p;
  p.rope = rope_for_layer(l);
  p.window = c_.layer_is_swa(l) ? c_.sliding_window : 0;
  p.scale = c_.attn_scale > 0 ? c_.attn_scale : float(1.0 / std::sqrt(double(c_.head_dim)));
  return p;
}

void PlanBuilder::embed(float scale) {
  op("token_embd", EmbedOp{w_.token_embd, plan_.tokens, x_, n_, c_.dim, scale});
}

void PlanBuilder::begin_layer(int64_t l) {
  layer_ = int(l);
  prefix_ = cat("blk.", l, ".");
  const KvLayout& kv = plan_.shape.kv;
  const bool own_pool = kv.n_pages_swa > 0 && c_.layer_is_swa(l);
  const int64_t rows = own_pool ? kv.swa_cache_rows() : kv.cache_rows();
  layer_cache_rows_ = rows;
  layer_kv_rows_ = own_pool ? kv_rows_swa_ : kv_rows_;
  layer_pages_ = own_pool ? pages_swa_ : pages_;
  k_cache_ = plan_.add_buffer(cat(prefix_, "k_cache"), kv.type, BufferRole::Persistent, rows * c_.n_kv_heads * c_.head_dim);
  v_cache_ =
      plan_.add_buffer(cat(prefix_, "v_cache"), kv.type, BufferRole::Persistent, rows * c_.n_kv_heads * c_.head_dim_v);
}

void PlanBuilder::attention(const LayerWeights& L, const AttentionParams& p) {
  const int64_t n = n_, dim = c_.dim;
  const int64_t q_dim = c_.n_heads * c_.head_dim, kv_dim = c_.n_kv_heads * c_.head_dim;
  const int64_t v_dim = c_.n_kv_heads * c_.head_dim_v, att_dim = c_.n_heads * c_.head_dim_v;
  const BufferId q = scratch("q", n * q_dim), k = scratch("k", n * kv_dim), v = scratch("v", n * v_dim);
  const BufferId att = scratch("att", n * att_dim);
  const PlanShape& shape = plan_.shape;
  const int64_t rope_dims = c_.rope_dims > 0 ? c_.rope_dims : c_.head_dim;

  op("attn_norm", RmsNormOp{x_, xb_, L.attn_norm, n, dim, 0, c_.rms_eps});
  op("attn_q", MatMulOp{xb_, q, L.wq, n, dim, q_dim});
  op("attn_k", MatMulOp{xb_, k, L.wk, n, dim, kv_dim});
  op("attn_v", MatMulOp{xb_, v, L.wv, n, dim, v_dim});
  if (L.bq != kNoWeight) op("attn_q.bias", AddBiasOp{q, L.bq, n, q_dim});
  if (L.bk != kNoWeight) op("attn_k.bias", AddBiasOp{k, L.bk, n, kv_dim});
  if (L.bv != kNoWeight) op("attn_v.bias", AddBiasOp{v, L.bv, n, v_dim});
  if (L.q_norm != kNoWeight) op("attn_q_norm", RmsNormOp{q, q, L.q_norm, n * c_.n_heads, c_.head_dim, 0, c_.rms_eps});
  if (L.k_norm != kNoWeight) op("attn_k_norm", RmsNormOp{k, k, L.k_norm, n * c_.n_kv_heads, c_.head_dim, 0, c_.rms_eps});
  const RopeParams& r = p.rope;
  for (const auto& [label, buf, heads] : {std::tuple{"rope_q", q, c_.n_heads}, std::tuple{"rope_k", k, c_.n_kv_heads}})
    op(label, RopeOp{buf, plan_.positions, n, heads, c_.head_dim, rope_dims, c_.rope_pairing, r.base, r.scale,
                     r.freq_factors, r.ext_factor, r.attn_factor, r.yarn_low, r.yarn_high});
  op("k_cache", KvWriteOp{k, k_cache_, layer_kv_rows_, n, kv_dim, layer_cache_rows_});
  op("v_cache", KvWriteOp{v, v_cache_, layer_kv_rows_, n, v_dim, layer_cache_rows_});
  op("attn", AttentionOp{q, k_cache_, v_cache_, plan_.positions, seq_, layer_pages_, att, n, c_.n_heads,
                         c_.n_kv_heads, c_.head_dim, c_.head_dim_v, shape.n_seqs, shape.kv.page_size,
                         shape.kv.pages_per_seq, layer_cache_rows_, p.scale, shape.decode, p.window, L.attn_sinks});
  op("attn_output", MatMulOp{att, xb_, L.wo, n, att_dim, dim});
  if (L.bo != kNoWeight) op("attn_output.bias", AddBiasOp{xb_, L.bo, n, dim});
  if (L.attn_post_norm != kNoWeight)
    op("post_attention_norm", RmsNormOp{xb_, xb_, L.attn_post_norm, n, dim, 0, c_.rms_eps});
  op("attn_residual", AddOp{x_, xb_, n * dim});
}

void PlanBuilder::dense_ffn(const LayerWeights& L, GluKind glu) {
  const int64_t n = n_, dim = c_.dim, ffn = c_.ffn_dim;
  const BufferId hb = scratch("hb", n * ffn), hb2 = scratch("hb2", n * ffn);  // gate then GLU; up
  op("ffn_norm", RmsNormOp{x_, xb_, L.ffn_norm, n, dim, 0, c_.rms_eps});
  op("ffn_gate", MatMulOp{xb_, hb, L.w_gate, n, dim, ffn});
  op("ffn_up", MatMulOp{xb_, hb2, L.w_up, n, dim, ffn});
  op("ffn_glu", GluOp{hb, hb2, hb, n * ffn, glu});
  op("ffn_down", MatMulOp{hb, xb_, L.w_down, n, ffn, dim});
  if (L.ffn_post_norm != kNoWeight) op("post_ffw_norm", RmsNormOp{xb_, xb_, L.ffn_post_norm, n, dim, 0, c_.rms_eps});
  op("ffn_residual", AddOp{x_, xb_, n * dim});
}

void PlanBuilder::moe_ffn(const LayerWeights& L, const MoeParams& p) {
  const int64_t n = n_, dim = c_.dim, ffn = c_.expert_ffn_dim, E = c_.n_experts, k = c_.n_experts_used;
  const BufferId logits = scratch("moe_logits", n * E);
  const BufferId experts = scratch("moe_experts", n * k, ElemType::I32);
  const BufferId weights = scratch("moe_weights", n * k);
  const BufferId gate = scratch("moe_gate", n * k * ffn), up = scratch("moe_up", n * k * ffn);
  const BufferId down = scratch("moe_down", n * k * dim);
  op("ffn_norm", RmsNormOp{x_, xb_, L.ffn_norm, n, dim, 0, c_.rms_eps});
  op("ffn_gate_inp", MatMulOp{xb_, logits, L.router, n, dim, E});
  if (L.router_bias != kNoWeight) op("ffn_gate_inp.bias", AddBiasOp{logits, L.router_bias, n, E});
  op("ffn_moe_route", MoeRouteOp{logits, experts, weights, n, E, k, p.gating, p.normalize});
  op("ffn_gate_exps", MoeMatMulOp{xb_, experts, gate, L.gate_exps, L.gate_exps_bias, n, k, dim, ffn, E, false});
  op("ffn_up_exps", MoeMatMulOp{xb_, experts, up, L.up_exps, L.up_exps_bias, n, k, dim, ffn, E, false});
  op("ffn_moe_glu", GluOp{gate, up, gate, n * k * ffn, p.glu});
  op("ffn_down_exps", MoeMatMulOp{gate, experts, down, L.down_exps, L.down_exps_bias, n, k, ffn, dim, E, true});
  op("ffn_moe_combine", MoeCombineOp{down, weights, xb_, n, k, dim});
  op("ffn_residual", AddOp{x_, xb_, n * dim});
}

Plan PlanBuilder::finish() {
  layer_ = -1;
  prefix_.clear();
  BufferId final_in = x_;
  if (logit_rows_ != kNoBuffer) {
    op("logit_rows", GatherRowsOp{x_, logit_rows_, xb_, plan_.n_logit_rows, c_.dim});
    final_in = xb_;
  }
  op("output_norm", RmsNormOp{final_in, xb_, w_.output_norm, plan_.n_logit_rows, c_.dim, 0, c_.rms_eps});
  op("output", MatMulOp{xb_, plan_.logits, w_.output, plan_.n_logit_rows, c_.dim, c_.vocab_size});
  return std::move(plan_);
}

Plan build_decoder(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape, const DecoderParams& p) {
  PlanBuilder b(c, w, shape);
  b.embed(c.embed_scale);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    b.begin_layer(l);
    b.attention(L, b.attention_for_layer(l));
    if (L.router != kNoWeight) b.moe_ffn(L, p.moe);
    else b.dense_ffn(L, p.glu);
  }
  return b.finish();
}

}  // namespace greta::engine::arch
