#include "vk/backend/fusion.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "core/error.h"

namespace greta::vk {

namespace {

using engine::BufferId;
using engine::BufferRole;
using engine::OpRange;
using engine::Plan;

// Decode steps: the fusions into matvecs are for at most this many tokens.
constexpr int64_t kDecodeMaxTokens = 4;
// The rope_kv kernel takes steps of up to this many tokens (batched decode: one per sequence), where its four
// dispatches' stages cost more than their work (H200, 8B at 16 sequences: 4.0-4.8 us each). Prefill keeps them apart:
// on the H100 the fused kernel took 1.78 ms of a 7B pp512 against 0.88 + 0.73 for rope and the cache writes.
constexpr int64_t kRopeKvMaxTokens = 64;

bool reads(const engine::PlanOp& op, BufferId b) {
  const std::vector<BufferId> r = engine::read_buffers(op);
  return std::find(r.begin(), r.end(), b) != r.end();
}
BufferId writes(const engine::PlanOp& op) { return engine::written_buffer(op); }

// When op i is a matmul writing a scratch product P and op i + 1 (inside `end`) adds P into x over exactly P's
// elements, and P is read by no later op before it is written again, returns the matmul retargeted to x (to run as
// x += W in); otherwise nothing.
// The same for any op i making `product` (elems values) from `inputs`: the buffer x its result would be added into.
std::optional<BufferId> residual_add_into(const Plan& plan, size_t i, size_t end, BufferId product, int64_t elems,
                                          std::initializer_list<BufferId> inputs) {
  if (i + 1 >= end) return std::nullopt;
  const auto* add = std::get_if<engine::AddOp>(&plan.ops[i + 1].op);
  if (!add || add->y != product || add->x == product || add->elems != elems ||
      plan.buffers[size_t(product)].role != BufferRole::Scratch)
    return std::nullopt;
  for (BufferId in : inputs)
    if (add->x == in) return std::nullopt;
  for (size_t j = i + 2; j < plan.ops.size(); ++j) {
    if (reads(plan.ops[j], product)) return std::nullopt;
    if (writes(plan.ops[j]) == product) break;
  }
  return add->x;
}

std::optional<engine::MatMulOp> fused_residual_matmul(const Plan& plan, size_t i, size_t end) {
  const auto* mm = std::get_if<engine::MatMulOp>(&plan.ops[i].op);
  if (!mm) return std::nullopt;
  const auto x = residual_add_into(plan, i, end, mm->out, mm->n_tokens * mm->out_features, {mm->in});
  if (!x) return std::nullopt;
  engine::MatMulOp fused = *mm;
  fused.out = *x;
  return fused;
}

class Fuser {
public:
  Fuser(const Plan& plan, OpRange range, unsigned fusions, MatmulKernel matmul, const MoeInputCheck& moe_takes_input)
      : plan_(plan), range_(range), fusions_(fusions), matmul_(matmul), moe_takes_input_(moe_takes_input),
        records_(range.end - range.begin) {
    for (size_t i = range.begin; i < range.end; ++i) {
      OpRecord& r = rec(i);
      r.reads = engine::read_buffers(plan.ops[i]);
      r.writes = engine::written_buffers(plan.ops[i]);
      if (const auto* mm = std::get_if<engine::MatMulOp>(&plan.ops[i].op)) r.matmul.op = *mm;
    }
  }

  std::vector<OpRecord> run() {
    for (size_t i = range_.begin; i < range_.end; ++i) {
      if (rec(i).kind == OpRecord::Kind::absorbed) continue;
      const engine::OpVariant& op = plan_.ops[i].op;
      if (std::holds_alternative<engine::RmsNormOp>(op) && (fusions_ & kFuseNorm)) fuse_input(i);
      // SiLU's and gpt-oss's clamped GLU are built into the matvec's input stage; GELU's stays an op.
      if (const auto* glu = std::get_if<engine::GluOp>(&op);
          glu && (glu->kind == engine::GluKind::SiLU || glu->kind == engine::GluKind::SwiGluOai) &&
          (fusions_ & kFuseSwiglu))
        fuse_input(i);
      if (std::holds_alternative<engine::RopeOp>(op) && (fusions_ & kFuseRopeKv)) fuse_rope_kv(i);
      if (std::holds_alternative<engine::MatMulOp>(op) && (fusions_ & kFuseResidual)) fuse_residual(i);
      if (std::holds_alternative<engine::MatMulOp>(op) && (fusions_ & kFuseBias)) fuse_bias(i);
      if (std::holds_alternative<engine::MoeCombineOp>(op) && (fusions_ & kFuseResidual)) fuse_combine_residual(i);
      if (std::holds_alternative<engine::MoeRouteOp>(op) && (fusions_ & kFuseRoute)) fuse_route(i);
    }
    if ((fusions_ & kFuseSwiglu) && (fusions_ & kFuseGluOut))
      for (size_t d = range_.begin; d < range_.end; ++d) {
        pair_moe_glu(d);
        pair_dense_glu(d);
      }
    for (OpRecord& r : records_) {  // the buffers the recorded dispatches actually touch
      if (r.kind == OpRecord::Kind::moe_matmul) {
        const MoeFusedInput& m = *r.moe;
        const auto& mm = std::get<engine::MoeMatMulOp>(plan_.ops[size_t(&r - records_.data()) + range_.begin].op);
        r.reads = m.norm ? std::vector<BufferId>{m.norm->in, mm.experts}
                         : std::vector<BufferId>{m.swiglu->gate, m.swiglu->up, mm.experts};
        r.writes = {mm.out};
        continue;
      }
      if (r.kind != OpRecord::Kind::matmul) continue;
      const MatmulArgs& a = r.matmul;
      if (a.norm) r.reads = {a.norm->in};
      else if (a.swiglu) r.reads = {a.swiglu->gate, a.swiglu->up};
      else r.reads = {a.op.in};
      if (a.accumulate) r.reads.push_back(a.op.out);
      r.writes = {a.op.out};
      if (a.route) r.writes.insert(r.writes.end(), {a.route->experts, a.route->weights});
    }
    return std::move(records_);
  }

private:
  OpRecord& rec(size_t i) { return records_[i - range_.begin]; }
  bool in_range(size_t i) const { return i >= range_.begin && i < range_.end; }

  void absorb(size_t i, size_t into) {
    OpRecord& r = rec(i);
    r.kind = OpRecord::Kind::absorbed;
    r.into = into;
    r.reads.clear();
    r.writes.clear();
  }

  // The buffer the residual add after matmul i would make it write (x), or -1.
  BufferId residual_target(size_t i) const {
    if (!(fusions_ & kFuseResidual)) return engine::kNoBuffer;
    const auto fused = fused_residual_matmul(plan_, i, range_.end);
    return fused ? fused->out : engine::kNoBuffer;
  }

  // A matmul at j that can compute op i's output (a rmsnorm or a swiglu) itself from `sources`.
  bool can_take_input(size_t j, BufferId product, int64_t elems, std::initializer_list<BufferId> sources) {
    const auto* mm = std::get_if<engine::MatMulOp>(&plan_.ops[j].op);
    if (!mm || !in_range(j) || mm->in != product || mm->n_tokens * mm->in_features != elems) return false;
    if (mm->n_tokens > kDecodeMaxTokens || !matmul_uses_matvec(matmul_, *mm)) return false;
    const OpRecord& r = rec(j);
    if (r.kind != OpRecord::Kind::op || r.matmul.norm || r.matmul.swiglu) return false;
    // The matvec reads `sources` while it writes its output (and, fused, the residual stream): they must differ.
    const BufferId res = residual_target(j);
    for (BufferId s : sources)
      if (s == mm->out || s == res) return false;
    return true;
  }

  // An expert matmul at j (decode, on the block-wise kernels) that can make op i's output itself from `sources`:
  // the gate or up projection reading a rmsnorm's rows, or the down projection reading a SiLU GLU's slots.
  bool can_moe_take_input(size_t j, BufferId product, int64_t elems, bool from_norm,
                          std::initializer_list<BufferId> sources) {
    const auto* mm = std::get_if<engine::MoeMatMulOp>(&plan_.ops[j].op);
    if (!mm || !in_range(j) || mm->in != product || mm->n_tokens > kDecodeMaxTokens || !moe_takes_input_ ||
        !moe_takes_input_(*mm) || rec(j).kind != OpRecord::Kind::op || mm->per_slot_input == from_norm)
      return false;
    if ((mm->per_slot_input ? mm->n_tokens * mm->k : mm->n_tokens) * mm->in_features != elems) return false;
    for (BufferId s : sources)
      if (s == mm->out || s == mm->experts) return false;
    return true;
  }

  // Op i is a rmsnorm or a swiglu: its output's decode matvec readers make it themselves. Walks the plan from i on:
  // a reader that can take the input is fused, any other reader (or one after `sources` change) keeps op i.
  void fuse_input(size_t i) {
    const engine::PlanOp& op = plan_.ops[i];
    const auto* norm = std::get_if<engine::RmsNormOp>(&op.op);
    const auto* swiglu = std::get_if<engine::GluOp>(&op.op);
    const BufferId product = writes(op);
    if (plan_.buffers[size_t(product)].role != BufferRole::Scratch) return;
    std::vector<BufferId> sources;
    int64_t elems = 0;
    if (norm) {
      if (norm->in == norm->out || norm->rows > kDecodeMaxTokens) return;
      sources = {norm->in};
      elems = norm->rows * norm->width;
    } else {
      sources = {swiglu->gate, swiglu->up};
      elems = swiglu->elems;
    }
    std::vector<size_t> fused;
    bool keep = false, sources_changed = false;
    for (size_t j = i + 1; j < plan_.ops.size(); ++j) {
      const engine::PlanOp& o = plan_.ops[j];
      if (reads(o, product)) {
        const bool ok = !sources_changed &&
                        (norm ? can_take_input(j, product, elems, {norm->in})
                              : can_take_input(j, product, elems, {swiglu->gate, swiglu->up}));
        const bool moe_ok = !ok && !sources_changed &&
                            (norm ? can_moe_take_input(j, product, elems, true, {norm->in})
                                  : can_moe_take_input(j, product, elems, false, {swiglu->gate, swiglu->up}));
        if (ok || moe_ok) fused.push_back(j);
        else keep = true;
      }
      const BufferId w = writes(o);
      if (w == product) break;
      if (std::find(sources.begin(), sources.end(), w) != sources.end()) sources_changed = true;
    }
    if (fused.empty()) return;
    // A kept op i that overwrites its own source (swiglu's out = gate) would race with the matvecs reading it.
    if (keep && std::find(sources.begin(), sources.end(), product) != sources.end()) return;
    for (size_t j : fused) {
      OpRecord& r = rec(j);
      if (std::holds_alternative<engine::MoeMatMulOp>(plan_.ops[j].op)) {
        r.kind = OpRecord::Kind::moe_matmul;
        r.moe = MoeFusedInput{};
        if (norm) r.moe->norm = *norm;
        else r.moe->swiglu = *swiglu;
        continue;
      }
      r.kind = OpRecord::Kind::matmul;
      if (norm) r.matmul.norm = *norm;
      else r.matmul.swiglu = *swiglu;
    }
    if (!keep) absorb(i, fused.front());
  }

  // rope_q, rope_k, k_cache [, v_cache] at i.. (the plan's order) with matching shapes and distinct buffers.
  void fuse_rope_kv(size_t i) {
    if (i + 2 >= range_.end) return;
    const auto* q = std::get_if<engine::RopeOp>(&plan_.ops[i].op);
    const auto* k = std::get_if<engine::RopeOp>(&plan_.ops[i + 1].op);
    const auto* kw = std::get_if<engine::KvWriteOp>(&plan_.ops[i + 2].op);
    if (!q || !k || !kw || q->n_tokens > kRopeKvMaxTokens) return;
    if (q->x == k->x || q->positions != k->positions || q->n_tokens != k->n_tokens || q->head_dim != k->head_dim ||
        q->rope_dims != k->rope_dims || q->pairing != k->pairing || q->base != k->base ||
        q->freq_scale != k->freq_scale || q->freq_factors != k->freq_factors || q->ext_factor != k->ext_factor ||
        q->attn_factor != k->attn_factor || q->yarn_low != k->yarn_low || q->yarn_high != k->yarn_high)
      return;  // one frequency table (YaRN's too: rope_inv_freq) for both
    // The cache rows come from kw->rows (the step's KvRows), the rotation angles from the positions.
    if (kw->src != k->x || kw->n_tokens != k->n_tokens || kw->width != k->n_heads * k->head_dim ||
        kw->cache == q->x || kw->cache == k->x || kw->cache == q->positions || kw->cache == kw->rows)
      return;
    // rope_kv.comp writes f32 and f16 caches only: over a Q8_0 cache the separate rope and kv_write_q8 (whole
    // blocks of 32 per invocation) run.
    if (plan_.buffers[size_t(kw->cache)].type == engine::ElemType::Q8_0) return;
    RopeKvArgs a{*q, *k, *kw, std::nullopt};
    OpRecord& r = rec(i);
    r.reads = {q->x, k->x, q->positions, kw->rows};
    r.writes = {q->x, k->x, kw->cache};
    if (i + 3 < range_.end) {
      const auto* vw = std::get_if<engine::KvWriteOp>(&plan_.ops[i + 3].op);
      const auto distinct = [&](BufferId b) { return b != q->x && b != k->x && b != kw->cache; };
      // One kernel variant per cache type: V's cache must have K's type (and K's rows).
      if (vw && vw->rows == kw->rows && vw->n_tokens == k->n_tokens && distinct(vw->src) && distinct(vw->cache) &&
          vw->src != vw->cache && vw->cache != kw->rows &&
          plan_.buffers[size_t(vw->cache)].type == plan_.buffers[size_t(kw->cache)].type) {
        a.v_write = *vw;
        r.reads.push_back(vw->src);
        r.writes.push_back(vw->cache);
      }
    }
    // The per-head norms of q and k just before (qwen3, qwen3moe, gemma3), in place, one row per head: into the
    // same dispatch.
    if (i >= range_.begin + 2) {
      const auto* qn = std::get_if<engine::RmsNormOp>(&plan_.ops[i - 2].op);
      const auto* kn = std::get_if<engine::RmsNormOp>(&plan_.ops[i - 1].op);
      const auto per_head = [&](const engine::RmsNormOp* n, const engine::RopeOp* rope) {
        return n && n->in == rope->x && n->out == rope->x && n->rows == rope->n_tokens * rope->n_heads &&
               n->width == rope->head_dim && n->in_row_offset == 0;
      };
      if (per_head(qn, q) && per_head(kn, k) && rec(i - 2).kind == OpRecord::Kind::op &&
          rec(i - 1).kind == OpRecord::Kind::op) {
        a.q_norm = *qn;
        a.k_norm = *kn;
        absorb(i - 2, i);
        absorb(i - 1, i);
      }
    }
    r.kind = OpRecord::Kind::rope_kv;
    r.rope_kv = a;
    absorb(i + 1, i);
    absorb(i + 2, i);
    if (a.v_write) absorb(i + 3, i);
  }

  void fuse_residual(size_t i) {
    const auto fused = fused_residual_matmul(plan_, i, range_.end);
    if (!fused || rec(i + 1).kind != OpRecord::Kind::op) return;
    OpRecord& r = rec(i);
    r.kind = OpRecord::Kind::matmul;
    r.matmul.op = *fused;
    r.matmul.accumulate = true;
    absorb(i + 1, i);
  }

  // A decode matvec at i whose product gets its bias added by a later op j (AddBiasOp over exactly the product, with
  // no op between them touching the product: gpt-oss's q, k and v projections come before their three bias adds):
  // the matvec adds it (the BIAS stage of matvec_block.comp and matvec.comp), and op j is dropped.
  void fuse_bias(size_t i) {
    OpRecord& r = rec(i);
    if ((r.kind != OpRecord::Kind::op && r.kind != OpRecord::Kind::matmul) || r.matmul.accumulate) return;
    const engine::MatMulOp& mm = r.matmul.op;
    if (mm.n_tokens > kDecodeMaxTokens || !matmul_uses_matvec(matmul_, mm)) return;
    size_t j = i + 1;
    for (; j < range_.end; ++j) {
      const engine::PlanOp& o = plan_.ops[j];
      if (std::holds_alternative<engine::AddBiasOp>(o.op) && std::get<engine::AddBiasOp>(o.op).x == mm.out) break;
      if (reads(o, mm.out) || writes(o) == mm.out) return;
    }
    if (j >= range_.end || rec(j).kind != OpRecord::Kind::op) return;
    const auto& add = std::get<engine::AddBiasOp>(plan_.ops[j].op);
    if (add.rows != mm.n_tokens || add.width != mm.out_features) return;
    r.kind = OpRecord::Kind::matmul;
    r.matmul.bias = add.bias;
    absorb(j, i);
    // Then the residual add of the biased product right after it (gpt-oss's attention output): y += W x + b.
    if (j != i + 1 || !(fusions_ & kFuseResidual) || j + 1 >= range_.end || rec(j + 1).kind != OpRecord::Kind::op)
      return;
    if (const auto x = residual_add_into(plan_, j, range_.end, mm.out, mm.n_tokens * mm.out_features, {mm.in})) {
      r.matmul.op.out = *x;
      r.matmul.accumulate = true;
      absorb(j + 1, i);
    }
  }

  // moe_combine + the residual add of its output: the combine adds into the residual stream itself.
  void fuse_combine_residual(size_t i) {
    const auto& combine = std::get<engine::MoeCombineOp>(plan_.ops[i].op);
    const auto x = residual_add_into(plan_, i, range_.end, combine.out, combine.n_tokens * combine.width,
                                     {combine.in, combine.weights});
    if (!x || rec(i + 1).kind != OpRecord::Kind::op) return;
    OpRecord& r = rec(i);
    r.kind = OpRecord::Kind::combine_residual;
    r.combine = combine;
    r.combine->out = *x;
    r.reads = {combine.in, combine.weights, *x};
    r.writes = {*x};
    absorb(i + 1, i);
  }

  // The gate and up projections (at the indices returned) of the GLU that the down projection at d makes itself:
  // walking back from d over absorbed records, every other record must be one `output` accepts (it returns the buffer
  // the record writes, or nothing to stop the walk) writing the GLU's gate or up, until both are found.
  template <class Output>
  std::optional<std::pair<size_t, size_t>> glu_sources(size_t d, const engine::GluOp& glu, Output output) {
    std::optional<size_t> gate, up;
    for (size_t j = d; j > range_.begin && (!gate || !up);) {
      --j;
      if (rec(j).kind == OpRecord::Kind::absorbed) continue;
      const std::optional<BufferId> out = output(j);
      if (out && *out == glu.gate && !gate) gate = j;
      else if (out && *out == glu.up && !up) up = j;
      else break;
    }
    if (!gate || !up) return std::nullopt;
    return std::pair{*gate, *up};
  }

  // A decode MoE layer's gate and up projections (both making their normalized input themselves) whose GLU the down
  // projection makes itself: the pair may make the down projection's int8 input too (MoeGluPair; the encoder decides
  // with moe_glu_pair_usable). Only absorbed ops may lie between the pair and the down projection.
  void pair_moe_glu(size_t d) {
    const OpRecord& down = rec(d);
    if (down.kind != OpRecord::Kind::moe_matmul || !down.moe->swiglu) return;
    const auto found = glu_sources(d, *down.moe->swiglu, [&](size_t j) -> std::optional<BufferId> {
      const OpRecord& r = rec(j);
      const auto* mm = std::get_if<engine::MoeMatMulOp>(&plan_.ops[j].op);
      if (!mm || r.kind != OpRecord::Kind::moe_matmul || !r.moe->norm || r.moe->glu_pair) return std::nullopt;
      return mm->out;
    });
    if (!found) return;
    const auto op = [&](size_t i) { return std::get<engine::MoeMatMulOp>(plan_.ops[i].op); };
    MoeGluPair pair{op(found->first), op(found->second), op(d), *down.moe->swiglu, false};
    rec(found->first).moe->glu_pair = pair;
    pair.is_up = true;
    rec(found->second).moe->glu_pair = pair;
  }

  // The same for a dense layer: the decode down projection `d` making its GLU input itself, and the gate and up
  // projections before it (only absorbed ops between, as the ffn_norm they make themselves) on the matvecs, writing
  // nothing else: both get the pair (GluPair; the encoder decides with glu_pair_usable).
  void pair_dense_glu(size_t d) {
    const OpRecord& down = rec(d);
    if (down.kind != OpRecord::Kind::matmul || !down.matmul.swiglu || down.matmul.op.n_tokens > kDecodeMaxTokens)
      return;
    const auto found = glu_sources(d, *down.matmul.swiglu, [&](size_t j) -> std::optional<BufferId> {
      const OpRecord& r = rec(j);
      const MatmulArgs& a = r.matmul;
      if (!std::holds_alternative<engine::MatMulOp>(plan_.ops[j].op) ||
          (r.kind != OpRecord::Kind::op && r.kind != OpRecord::Kind::matmul) || a.accumulate || a.swiglu || a.bias ||
          a.route || a.glu_pair || !matmul_uses_matvec(matmul_, a.op))
        return std::nullopt;
      return a.op.out;
    });
    if (!found) return;
    GluPair pair{rec(found->first).matmul.op, rec(found->second).matmul.op, down.matmul.op, *down.matmul.swiglu, false};
    for (size_t k : {found->first, found->second}) rec(k).kind = OpRecord::Kind::matmul;
    rec(found->first).matmul.glu_pair = pair;
    pair.is_up = true;
    rec(found->second).matmul.glu_pair = pair;
  }

  // A decode step's MoE route over the logits of the router matvec recorded just before it (the ops between, if any,
  // absorbed into that matvec: gpt-oss's router bias): the matvec routes too, in its last workgroup (matvec.comp's
  // ROUTE), and the route's own stage between two barriers goes.
  void fuse_route(size_t i) {
    const auto& route = std::get<engine::MoeRouteOp>(plan_.ops[i].op);
    if (route.n_tokens > kDecodeMaxTokens || i == range_.begin) return;
    size_t j = i - 1;
    while (j > range_.begin && rec(j).kind == OpRecord::Kind::absorbed) --j;
    OpRecord& r = rec(j);
    if (r.kind != OpRecord::Kind::op && r.kind != OpRecord::Kind::matmul) return;
    if (!std::holds_alternative<engine::MatMulOp>(plan_.ops[j].op)) return;
    const engine::MatMulOp& mm = r.matmul.op;
    if (mm.out != route.logits || r.matmul.accumulate || r.matmul.route || mm.n_tokens != route.n_tokens ||
        mm.out_features != route.n_experts || !matmul_uses_matvec(matmul_, mm))
      return;
    for (size_t k = j + 1; k < i; ++k)
      if (rec(k).kind != OpRecord::Kind::absorbed || rec(k).into != j) return;  // only ops folded into the router
    for (BufferId b : {route.experts, route.weights})
      if (b == mm.in || b == mm.out || (r.matmul.norm && b == r.matmul.norm->in)) return;
    r.kind = OpRecord::Kind::matmul;
    r.matmul.route = route;
    absorb(i, j);
  }

  const Plan& plan_;
  OpRange range_;
  unsigned fusions_;
  MatmulKernel matmul_;
  const MoeInputCheck& moe_takes_input_;
  std::vector<OpRecord> records_;
};

}  // namespace

unsigned fusions_from_switches(unsigned chosen, const ExperimentSwitches& switches) {
  const char* v = switches.get("GRETA_VK_FUSE");
  if (!v) return chosen;
  const std::string_view s(v);
  if (s == "all") return kFuseAll;
  if (s == "none") return 0;
  unsigned bits = 0;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string_view name = s.substr(at, comma - at);
    if (name == "residual") bits |= kFuseResidual;
    else if (name == "bias") bits |= kFuseBias;
    else if (name == "norm") bits |= kFuseNorm;
    else if (name == "rope_kv") bits |= kFuseRopeKv;
    else if (name == "swiglu") bits |= kFuseSwiglu;
    else if (name == "route") bits |= kFuseRoute;
    else if (name == "glu_out") bits |= kFuseGluOut;
    else if (name == "norm_out") bits |= kFuseNormOut;
    else if (name == "rope_out") bits |= kFuseRopeOut;
    else
      fail("GRETA_VK_FUSE=", s, ": expected all, none or a comma-separated list of residual, norm, rope_kv, swiglu, bias, ",
           "route, glu_out, norm_out, rope_out");
    at = comma + 1;
  }
  return bits;
}

std::vector<OpRecord> plan_records(const Plan& plan, OpRange range, unsigned fusions, MatmulKernel matmul,
                                   const MoeInputCheck& moe_takes_input) {
  GRETA_CHECK(range.begin <= range.end && range.end <= plan.ops.size());
  return Fuser(plan, range, fusions, matmul, moe_takes_input).run();
}

std::vector<OpEncoder::SumReader> split_sum_readers(const OpRecord& rec, const engine::OpVariant& op) {
  std::vector<OpEncoder::SumReader> readers;
  if (rec.kind == OpRecord::Kind::rope_kv) {
    const RopeKvArgs& a = *rec.rope_kv;
    // rope_kv.comp leaves q's past-rotary dims untouched; qk_norm_rope_kv.comp writes every dim.
    if (!a.q_norm && a.q.rope_dims != a.q.head_dim) return readers;
    // Each of q, k and v its own buffer: one element's partials are added by one invocation only.
    if (a.q.x == a.k.x || (a.v_write && (a.v_write->src == a.q.x || a.v_write->src == a.k.x))) return readers;
    readers.push_back({a.q.x, uint64_t(a.q.n_tokens * a.q.n_heads * a.q.head_dim)});
    readers.push_back({a.k.x, uint64_t(a.k.n_tokens * a.k.n_heads * a.k.head_dim)});
    if (a.v_write) readers.push_back({a.v_write->src, uint64_t(a.v_write->n_tokens * a.v_write->width)});
  } else if (rec.kind == OpRecord::Kind::op) {
    if (const auto* norm = std::get_if<engine::RmsNormOp>(&op); norm && norm->in_row_offset == 0)
      readers.push_back({norm->in, uint64_t(norm->rows * norm->width)});
    if (const auto* glu = std::get_if<engine::GluOp>(&op); glu && glu->gate != glu->up) {
      readers.push_back({glu->gate, uint64_t(glu->elems)});
      readers.push_back({glu->up, uint64_t(glu->elems)});
    }
  }
  return readers;
}

}  // namespace greta::vk
