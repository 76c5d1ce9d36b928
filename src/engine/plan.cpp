#include "engine/plan.h"

#include <algorithm>
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
    case OpKind::GatherRows: return "gather_rows";
  }
  return "?";
}

BufferId Plan::input_buffer(BufferRole role) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].role == role) return BufferId(i);
  return kNoBuffer;
}

int64_t StepInput::max_len() const {
  int64_t len = 1;
  for (int32_t p : positions) len = std::max<int64_t>(len, int64_t(p) + 1);
  return len;
}

PlanShape PlanShape::single(int64_t n_tokens, int64_t ctx, bool all_logits, ElemType kv_type) {
  PlanShape s;
  s.n_tokens = n_tokens;
  s.n_seqs = 1;
  s.n_logit_rows = all_logits ? n_tokens : 1;
  s.kv.type = kv_type;
  s.kv.pages_per_seq = (ctx + s.kv.page_size - 1) / s.kv.page_size;
  s.kv.n_pages = s.kv.pages_per_seq + 1;
  return s;
}

StepArrays single_sequence_step(const Plan& plan, std::span<const int32_t> tokens, int64_t start_pos) {
  const PlanShape& s = plan.shape;
  const int64_t n = int64_t(tokens.size()), P = s.kv.page_size;
  GRETA_CHECK(n >= 1 && n <= s.n_tokens, "single_sequence_step: ", n, " tokens for a plan of ", s.n_tokens);
  GRETA_CHECK(start_pos >= 0 && start_pos + n <= s.kv.pages_per_seq * P && s.kv.pages_per_seq + 1 <= s.kv.n_pages,
              "single_sequence_step: positions ", start_pos, "..", start_pos + n, " do not fit the plan's pages");
  GRETA_CHECK(n == s.n_tokens || s.n_seqs >= 2, "single_sequence_step: padding needs a spare page-table row");
  StepArrays a;
  a.tokens.assign(size_t(s.n_tokens), 0);
  a.positions.assign(size_t(s.n_tokens), 0);
  a.kv_rows.assign(size_t(s.n_tokens), 0);
  // Padding tokens use the last page-table row (all sink pages, 0) when the step is padded; the sequence is row 0.
  a.seq.assign(size_t(s.n_tokens), int32_t(s.n_seqs - 1));
  a.page_table.assign(size_t(s.n_seqs * s.kv.pages_per_seq), 0);
  for (int64_t i = 0; i < s.kv.pages_per_seq; ++i) a.page_table[size_t(i)] = int32_t(1 + i);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = start_pos + t;
    a.tokens[size_t(t)] = tokens[size_t(t)];
    a.positions[size_t(t)] = int32_t(p);
    a.kv_rows[size_t(t)] = int32_t((1 + p / P) * P + p % P);
    a.seq[size_t(t)] = 0;
  }
  if (s.n_logit_rows < s.n_tokens) a.logit_rows.assign(size_t(s.n_logit_rows), int32_t(n - 1));
  return a;
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

  Plan plan;
  plan.shape = shape;
  plan.vocab = c.vocab_size;
  plan.n_logit_rows = shape.n_logit_rows;
  const bool gather = shape.n_logit_rows < n;

  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  const int64_t v_dim = c.n_kv_heads * c.head_dim_v, att_dim = c.n_heads * c.head_dim_v;
  const int64_t cache_rows = kv.cache_rows();

  // Step inputs, activations (scratch, reused by every layer) and the result.
  plan.tokens = plan.add_buffer("inp_tokens", ElemType::I32, BufferRole::Tokens, n);
  plan.positions = plan.add_buffer("inp_pos", ElemType::I32, BufferRole::Positions, n);
  const BufferId kv_rows = plan.add_buffer("inp_kv_rows", ElemType::I32, BufferRole::KvRows, n);
  const BufferId seq = plan.add_buffer("inp_seq", ElemType::I32, BufferRole::SeqIndex, n);
  const BufferId pages =
      plan.add_buffer("inp_pages", ElemType::I32, BufferRole::PageTable, shape.n_seqs * kv.pages_per_seq);
  const BufferId logit_rows =
      gather ? plan.add_buffer("inp_logit_rows", ElemType::I32, BufferRole::LogitRows, shape.n_logit_rows) : kNoBuffer;
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
        plan.add_buffer(cat("blk.", l, ".k_cache"), kv.type, BufferRole::Persistent, cache_rows * kv_dim);
    const BufferId v_cache =
        plan.add_buffer(cat("blk.", l, ".v_cache"), kv.type, BufferRole::Persistent, cache_rows * v_dim);

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
    out.op("k_cache", KvWriteOp{k, k_cache, kv_rows, n, kv_dim, cache_rows});
    out.op("v_cache", KvWriteOp{v, v_cache, kv_rows, n, v_dim, cache_rows});
    out.op("attn", AttentionOp{q, k_cache, v_cache, plan.positions, seq, pages, att, n, c.n_heads, c.n_kv_heads,
                               c.head_dim, c.head_dim_v, shape.n_seqs, kv.page_size, kv.pages_per_seq, cache_rows,
                               attn_scale, shape.decode});
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

  // Final norm and logits: for every token in order, or for the rows listed in inp_logit_rows (gathered into xb).
  out.layer = -1;
  out.prefix.clear();
  BufferId final_in = x;
  if (gather) {
    out.op("logit_rows", GatherRowsOp{x, logit_rows, xb, plan.n_logit_rows, c.dim});
    final_in = xb;
  }
  out.op("output_norm", RmsNormOp{final_in, xb, w.output_norm, plan.n_logit_rows, c.dim, 0, c.rms_eps});
  out.op("output", MatMulOp{xb, plan.logits, w.output, plan.n_logit_rows, c.dim, c.vocab_size});
  return plan;
}

std::vector<BufferRegion> written_regions(const PlanOp& op, const StepInput& step) {
  if (const auto* kw = std::get_if<KvWriteOp>(&op.op)) {
    GRETA_CHECK(int64_t(step.kv_rows.size()) == kw->n_tokens, "written_regions: the step has no KV rows");
    std::vector<BufferRegion> rows;
    for (int32_t r : step.kv_rows) rows.push_back({kw->cache, int64_t(r) * kw->width, kw->width});
    return rows;
  }
  return std::visit(
      [&](const auto& o) -> std::vector<BufferRegion> {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp>) return {{o.out, 0, o.n_tokens * o.dim}};
        else if constexpr (std::is_same_v<T, RmsNormOp>) return {{o.out, 0, o.rows * o.width}};
        else if constexpr (std::is_same_v<T, MatMulOp>) return {{o.out, 0, o.n_tokens * o.out_features}};
        else if constexpr (std::is_same_v<T, AddBiasOp>) return {{o.x, 0, o.rows * o.width}};
        else if constexpr (std::is_same_v<T, RopeOp>) return {{o.x, 0, o.n_tokens * o.n_heads * o.head_dim}};
        else if constexpr (std::is_same_v<T, KvWriteOp>) return {};
        else if constexpr (std::is_same_v<T, AttentionOp>) return {{o.out, 0, o.n_tokens * o.n_heads * o.head_dim_v}};
        else if constexpr (std::is_same_v<T, SwiGluOp>) return {{o.out, 0, o.elems}};
        else if constexpr (std::is_same_v<T, GatherRowsOp>) return {{o.out, 0, o.n_rows * o.width}};
        else return {{o.x, 0, o.elems}};  // AddOp
      },
      op.op);
}

BufferId written_buffer(const PlanOp& op) {
  return std::visit(
      [](const auto& o) -> BufferId {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, KvWriteOp>) return o.cache;
        else if constexpr (std::is_same_v<T, AddBiasOp> || std::is_same_v<T, RopeOp> || std::is_same_v<T, AddOp>)
          return o.x;
        else return o.out;
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
        else if constexpr (std::is_same_v<T, KvWriteOp>) return {o.src, o.rows};
        else if constexpr (std::is_same_v<T, AttentionOp>)
          return {o.q, o.k_cache, o.v_cache, o.positions, o.seq, o.page_table};
        else if constexpr (std::is_same_v<T, SwiGluOp>) return {o.gate, o.up};
        else if constexpr (std::is_same_v<T, GatherRowsOp>) return {o.in, o.rows};
        else return {o.x, o.y};  // AddOp
      },
      op.op);
}

std::string Plan::describe() const {
  std::ostringstream os;
  os << "plan: " << shape.n_tokens << " token(s) of up to " << shape.n_seqs << " sequence(s), " << n_logit_rows
     << " logit row(s), KV " << shape.kv.n_pages << " pages of " << shape.kv.page_size << " (" << elem_type_name(shape.kv.type)
     << "), " << ops.size() << " ops, " << buffers.size() << " buffers\n";
  for (size_t i = 0; i < ops.size(); ++i) {
    os << "  " << i << "\t" << op_kind_name(ops[i].kind()) << "\t" << ops[i].label << "\t-> "
       << buffers[size_t(written_buffer(ops[i]))].name << "\n";
  }
  return os.str();
}

}  // namespace greta::engine
