#include "engine/plan.h"

#include <algorithm>
#include <iterator>
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
    case OpKind::Glu: return "glu";
    case OpKind::Add: return "add";
    case OpKind::GatherRows: return "gather_rows";
    case OpKind::MoeRoute: return "moe_route";
    case OpKind::MoeMatMul: return "moe_matmul";
    case OpKind::MoeCombine: return "moe_combine";
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

uint32_t op_features(const PlanOp& op) {
  if (const auto* e = std::get_if<EmbedOp>(&op.op)) return e->scale != 1.f ? kFeatureEmbedScale : 0u;
  if (const auto* r = std::get_if<RopeOp>(&op.op))
    return r->ext_factor != 0.f || r->attn_factor != 1.f ? kFeatureRopeScaling : 0u;
  if (const auto* a = std::get_if<AttentionOp>(&op.op))
    return (a->window > 0 ? kFeatureSlidingWindow : 0u) | (a->sinks != kNoWeight ? kFeatureSinks : 0u);
  if (const auto* g = std::get_if<GluOp>(&op.op))
    return g->kind == GluKind::GeluTanh ? kFeatureGeluGlu : g->kind == GluKind::SwiGluOai ? kFeatureOaiGlu : 0u;
  if (op.kind() == OpKind::MoeRoute || op.kind() == OpKind::MoeMatMul || op.kind() == OpKind::MoeCombine)
    return kFeatureMoe;
  return 0;
}

std::string feature_names(uint32_t features) {
  static const char* const kNames[] = {"embedding scale",  "YaRN / scaled rope", "sliding-window attention",
                                       "attention sinks",  "GELU-gated FFN",     "gpt-oss SwiGLU",
                                       "mixture of experts"};
  std::string out;
  for (uint32_t i = 0; i < std::size(kNames); ++i)
    if (features & (1u << i)) out += cat(out.empty() ? "" : ", ", kNames[i]);
  return out;
}

void require_features(const Plan& plan, uint32_t supported, const std::string& backend) {
  for (const PlanOp& op : plan.ops)
    if (const uint32_t missing = op_features(op) & ~supported)
      fail(backend, " does not support ", feature_names(missing), " yet (op ", op.label,
           "): run this model with --backend cpu");
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
        else if constexpr (std::is_same_v<T, GluOp>) return {{o.out, 0, o.elems}};
        else if constexpr (std::is_same_v<T, GatherRowsOp>) return {{o.out, 0, o.n_rows * o.width}};
        else if constexpr (std::is_same_v<T, MoeRouteOp>)
          return {{o.experts, 0, o.n_tokens * o.k}, {o.weights, 0, o.n_tokens * o.k}};
        else if constexpr (std::is_same_v<T, MoeMatMulOp>) return {{o.out, 0, o.n_tokens * o.k * o.out_features}};
        else if constexpr (std::is_same_v<T, MoeCombineOp>) return {{o.out, 0, o.n_tokens * o.width}};
        else return {{o.x, 0, o.elems}};  // AddOp
      },
      op.op);
}

std::vector<BufferId> written_buffers(const PlanOp& op) {
  std::vector<BufferId> out = {written_buffer(op)};
  if (const auto* route = std::get_if<MoeRouteOp>(&op.op)) out.push_back(route->experts);
  return out;
}

BufferId written_buffer(const PlanOp& op) {
  return std::visit(
      [](const auto& o) -> BufferId {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, KvWriteOp>) return o.cache;
        else if constexpr (std::is_same_v<T, MoeRouteOp>) return o.weights;  // and o.experts (written_regions)
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
        else if constexpr (std::is_same_v<T, GluOp>) return {o.gate, o.up};
        else if constexpr (std::is_same_v<T, GatherRowsOp>) return {o.in, o.rows};
        else if constexpr (std::is_same_v<T, MoeRouteOp>) return {o.logits};
        else if constexpr (std::is_same_v<T, MoeMatMulOp>) return {o.in, o.experts};
        else if constexpr (std::is_same_v<T, MoeCombineOp>) return {o.in, o.weights};
        else return {o.x, o.y};  // AddOp
      },
      op.op);
}

void for_each_ref(OpVariant& op, const std::function<void(BufferId&)>& buffer,
                  const std::function<void(WeightId&)>& weight) {
  std::visit(
      [&](auto& o) {
        using T = std::decay_t<decltype(o)>;
        const auto buffers = [&](auto&... ids) { (buffer(ids), ...); };
        const auto weights = [&](auto&... ids) { (weight(ids), ...); };
        if constexpr (std::is_same_v<T, EmbedOp>) buffers(o.tokens, o.out), weights(o.table);
        else if constexpr (std::is_same_v<T, RmsNormOp>) buffers(o.in, o.out), weights(o.weight);
        else if constexpr (std::is_same_v<T, MatMulOp>) buffers(o.in, o.out), weights(o.weight);
        else if constexpr (std::is_same_v<T, AddBiasOp>) buffers(o.x), weights(o.bias);
        else if constexpr (std::is_same_v<T, RopeOp>) buffers(o.x, o.positions), weights(o.freq_factors);
        else if constexpr (std::is_same_v<T, KvWriteOp>) buffers(o.src, o.cache, o.rows);
        else if constexpr (std::is_same_v<T, AttentionOp>)
          buffers(o.q, o.k_cache, o.v_cache, o.positions, o.seq, o.page_table, o.out), weights(o.sinks);
        else if constexpr (std::is_same_v<T, GluOp>) buffers(o.gate, o.up, o.out);
        else if constexpr (std::is_same_v<T, GatherRowsOp>) buffers(o.in, o.rows, o.out);
        else if constexpr (std::is_same_v<T, MoeRouteOp>) buffers(o.logits, o.experts, o.weights);
        else if constexpr (std::is_same_v<T, MoeMatMulOp>) buffers(o.in, o.experts, o.out), weights(o.weight, o.bias);
        else if constexpr (std::is_same_v<T, MoeCombineOp>) buffers(o.in, o.weights, o.out);
        else buffers(o.x, o.y);  // AddOp
      },
      op);
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
