#include "engine/plan.h"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "engine/model.h"

namespace greta::engine {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::Embed: return "embed";
    case OpKind::RmsNorm: return "rmsnorm";
    case OpKind::MatMul: return "matmul";
    case OpKind::AddBias: return "add_bias";
    case OpKind::Rope: return "rope";
    case OpKind::KvWrite: return "kv_write";
    case OpKind::Attention: return "attention";
    case OpKind::SwiGlu: return "swiglu";
    case OpKind::Add: return "add";
  }
  return "?";
}

BufferId Plan::add_buffer(std::string name, ElemType type, BufferRole role, int64_t elems) {
  GRETA_CHECK(elems > 0, name);
  buffers.push_back({std::move(name), type, role, elems});
  return BufferId(buffers.size() - 1);
}

namespace {

// Adds ops with the current layer and label prefix, so the builder below reads like the forward pass.
struct PlanWriter {
  Plan& plan;
  int layer = -1;
  std::string prefix;

  void op(const std::string& label, OpVariant v) { plan.ops.push_back({prefix + label, layer, std::move(v)}); }
};

}  // namespace

Plan build_plan(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  const int64_t n = shape.n_tokens;
  if (n <= 0) fail("plan: ", n, " tokens per step (need at least 1)");
  if (shape.ctx < n) fail("plan: context of ", shape.ctx, " positions cannot hold a step of ", n, " tokens");
  if (int64_t(w.layers.size()) != c.n_layers) fail("plan: weights have ", w.layers.size(), " layers, config ", c.n_layers);
  const int64_t rope_dims = c.rope_dims > 0 ? c.rope_dims : c.head_dim;
  if (rope_dims > c.head_dim || rope_dims % 2 != 0)
    fail("plan: rope dimension count ", rope_dims, " must be even and at most the head size ", c.head_dim);
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    fail("plan: ", c.n_heads, " heads are not a multiple of ", c.n_kv_heads, " KV heads");

  Plan plan;
  plan.shape = shape;
  plan.vocab = c.vocab_size;
  plan.n_logit_rows = shape.all_logits ? n : 1;

  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  const int64_t v_dim = c.n_kv_heads * c.head_dim_v, att_dim = c.n_heads * c.head_dim_v;

  // Step inputs, activations (scratch, reused by every layer) and the result.
  plan.tokens = plan.add_buffer("inp_tokens", ElemType::I32, BufferRole::Tokens, n);
  plan.positions = plan.add_buffer("inp_pos", ElemType::I32, BufferRole::Positions, n);
  const BufferId x = plan.add_buffer("x", ElemType::F32, BufferRole::Scratch, n * c.dim);     // residual stream
  const BufferId xb = plan.add_buffer("xb", ElemType::F32, BufferRole::Scratch, n * c.dim);   // normed / sublayer out
  const BufferId q = plan.add_buffer("q", ElemType::F32, BufferRole::Scratch, n * q_dim);
  const BufferId k = plan.add_buffer("k", ElemType::F32, BufferRole::Scratch, n * kv_dim);
  const BufferId v = plan.add_buffer("v", ElemType::F32, BufferRole::Scratch, n * v_dim);
  const BufferId att = plan.add_buffer("att", ElemType::F32, BufferRole::Scratch, n * att_dim);
  const BufferId hb = plan.add_buffer("hb", ElemType::F32, BufferRole::Scratch, n * c.ffn_dim);   // gate, then swiglu
  const BufferId hb2 = plan.add_buffer("hb2", ElemType::F32, BufferRole::Scratch, n * c.ffn_dim); // up
  plan.logits = plan.add_buffer("logits", ElemType::F32, BufferRole::Logits, plan.n_logit_rows * c.vocab_size);

  PlanWriter out{plan, -1, ""};
  out.op("token_embd", EmbedOp{w.token_embd, plan.tokens, x, n, c.dim});

  const float attn_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    out.layer = int(l);
    out.prefix = cat("blk.", l, ".");
    const BufferId k_cache =
        plan.add_buffer(cat("blk.", l, ".k_cache"), ElemType::F32, BufferRole::Persistent, shape.ctx * kv_dim);
    const BufferId v_cache =
        plan.add_buffer(cat("blk.", l, ".v_cache"), ElemType::F32, BufferRole::Persistent, shape.ctx * v_dim);

    // Attention block: x += wo . attention(rope(norm(x) . wq), cache(rope(norm(x) . wk)), cache(norm(x) . wv))
    out.op("attn_norm", RmsNormOp{x, xb, L.attn_norm, n, c.dim, 0, c.rms_eps});
    out.op("attn_q", MatMulOp{xb, q, L.wq, n, c.dim, q_dim});
    out.op("attn_k", MatMulOp{xb, k, L.wk, n, c.dim, kv_dim});
    out.op("attn_v", MatMulOp{xb, v, L.wv, n, c.dim, v_dim});
    if (L.bq != kNoWeight) out.op("attn_q.bias", AddBiasOp{q, L.bq, n, q_dim});
    if (L.bk != kNoWeight) out.op("attn_k.bias", AddBiasOp{k, L.bk, n, kv_dim});
    if (L.bv != kNoWeight) out.op("attn_v.bias", AddBiasOp{v, L.bv, n, v_dim});
    if (L.q_norm != kNoWeight) out.op("attn_q_norm", RmsNormOp{q, q, L.q_norm, n * c.n_heads, c.head_dim, 0, c.rms_eps});
    if (L.k_norm != kNoWeight)
      out.op("attn_k_norm", RmsNormOp{k, k, L.k_norm, n * c.n_kv_heads, c.head_dim, 0, c.rms_eps});
    out.op("rope_q", RopeOp{q, plan.positions, n, c.n_heads, c.head_dim, rope_dims, c.rope_pairing, c.rope_base,
                            c.rope_scale, w.rope_freqs});
    out.op("rope_k", RopeOp{k, plan.positions, n, c.n_kv_heads, c.head_dim, rope_dims, c.rope_pairing, c.rope_base,
                            c.rope_scale, w.rope_freqs});
    out.op("k_cache", KvWriteOp{k, k_cache, plan.positions, n, kv_dim, shape.ctx});
    out.op("v_cache", KvWriteOp{v, v_cache, plan.positions, n, v_dim, shape.ctx});
    out.op("attn", AttentionOp{q, k_cache, v_cache, plan.positions, att, n, c.n_heads, c.n_kv_heads, c.head_dim,
                               c.head_dim_v, shape.ctx, attn_scale});
    out.op("attn_output", MatMulOp{att, xb, L.wo, n, att_dim, c.dim});
    out.op("attn_residual", AddOp{x, xb, n * c.dim});

    // Feed-forward block: x += w_down . (silu(norm(x) . w_gate) * (norm(x) . w_up))
    out.op("ffn_norm", RmsNormOp{x, xb, L.ffn_norm, n, c.dim, 0, c.rms_eps});
    out.op("ffn_gate", MatMulOp{xb, hb, L.w_gate, n, c.dim, c.ffn_dim});
    out.op("ffn_up", MatMulOp{xb, hb2, L.w_up, n, c.dim, c.ffn_dim});
    out.op("ffn_swiglu", SwiGluOp{hb, hb2, hb, n * c.ffn_dim});
    out.op("ffn_down", MatMulOp{hb, xb, L.w_down, n, c.ffn_dim, c.dim});
    out.op("ffn_residual", AddOp{x, xb, n * c.dim});
  }

  // Final norm and logits, for every token or only the last one.
  out.layer = -1;
  out.prefix.clear();
  const int64_t first_row = shape.all_logits ? 0 : n - 1;
  out.op("output_norm", RmsNormOp{x, xb, w.output_norm, plan.n_logit_rows, c.dim, first_row, c.rms_eps});
  out.op("output", MatMulOp{xb, plan.logits, w.output, plan.n_logit_rows, c.dim, c.vocab_size});
  return plan;
}

BufferRegion written_region(const PlanOp& op, const StepInput& step) {
  return std::visit(
      [&](const auto& o) -> BufferRegion {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp>) return {o.out, 0, o.n_tokens * o.dim};
        else if constexpr (std::is_same_v<T, RmsNormOp>) return {o.out, 0, o.rows * o.width};
        else if constexpr (std::is_same_v<T, MatMulOp>) return {o.out, 0, o.n_tokens * o.out_features};
        else if constexpr (std::is_same_v<T, AddBiasOp>) return {o.x, 0, o.rows * o.width};
        else if constexpr (std::is_same_v<T, RopeOp>) return {o.x, 0, o.n_tokens * o.n_heads * o.head_dim};
        else if constexpr (std::is_same_v<T, KvWriteOp>) return {o.cache, step.start_pos * o.width, o.n_tokens * o.width};
        else if constexpr (std::is_same_v<T, AttentionOp>) return {o.out, 0, o.n_tokens * o.n_heads * o.head_dim_v};
        else if constexpr (std::is_same_v<T, SwiGluOp>) return {o.out, 0, o.elems};
        else return {o.x, 0, o.elems};  // AddOp
      },
      op.op);
}

std::vector<BufferId> read_buffers(const PlanOp& op) {
  return std::visit(
      [](const auto& o) -> std::vector<BufferId> {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp>) return {o.tokens};
        else if constexpr (std::is_same_v<T, RmsNormOp>) return {o.in};
        else if constexpr (std::is_same_v<T, MatMulOp>) return {o.in};
        else if constexpr (std::is_same_v<T, AddBiasOp>) return {o.x};
        else if constexpr (std::is_same_v<T, RopeOp>) return {o.x, o.positions};
        else if constexpr (std::is_same_v<T, KvWriteOp>) return {o.src, o.positions};
        else if constexpr (std::is_same_v<T, AttentionOp>) return {o.q, o.k_cache, o.v_cache, o.positions};
        else if constexpr (std::is_same_v<T, SwiGluOp>) return {o.gate, o.up};
        else return {o.x, o.y};  // AddOp
      },
      op.op);
}

std::string Plan::describe() const {
  std::ostringstream os;
  os << "plan: " << shape.n_tokens << " token(s), ctx " << shape.ctx << ", " << n_logit_rows << " logit row(s), "
     << ops.size() << " ops, " << buffers.size() << " buffers\n";
  for (size_t i = 0; i < ops.size(); ++i) {
    const BufferRegion out = written_region(ops[i], StepInput{});
    os << "  " << i << "\t" << op_kind_name(ops[i].kind()) << "\t" << ops[i].label << "\t-> "
       << buffers[size_t(out.buffer)].name << "\n";
  }
  return os.str();
}

}  // namespace greta::engine
