#include "engine/verify.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <variant>
#include <cstdio>

#include "core/error.h"
#include "model/model_config.h"

namespace greta::engine {

namespace {

// Rows (tokens, or logit rows) an op's output has, so that an error can be placed on a token; 0 when unknown.
int64_t row_count(const PlanOp& op) {
  return std::visit(
      [](const auto& o) -> int64_t {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbedOp> || std::is_same_v<T, MatMulOp> || std::is_same_v<T, RopeOp> ||
                      std::is_same_v<T, AttentionOp>)
          return o.n_tokens;
        else if constexpr (std::is_same_v<T, RmsNormOp> || std::is_same_v<T, AddBiasOp>) return o.rows;
        else if constexpr (std::is_same_v<T, GatherRowsOp>) return o.n_rows;
        else if constexpr (std::is_same_v<T, MoeMatMulOp>) return o.n_tokens * o.k;  // one row per (token, slot)
        else if constexpr (std::is_same_v<T, MoeCombineOp>) return o.n_tokens;
        else return 0;  // elementwise ops over whole buffers (the verify step's token count is not known here)
      },
      op.op);
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
}  // namespace

std::string VerifyReport::summary() const {
  if (ok())
    return cat("verify OK: ", tested, " vs ", reference, ", ", checks.size(), " op runs, worst NMSE ", sci(worst_nmse));
  const OpCheck& f = *first_failure;
  return cat("verify FAILED: ", tested, " vs ", reference, ": step ", f.step, " op ", f.op_index, " ", f.label, " (",
             op_kind_name(f.kind), f.layer >= 0 ? cat(", layer ", f.layer) : std::string(),
             f.expert >= 0 ? cat(", expert ", f.expert) : std::string(), ")",
             f.seq >= 0 ? cat(" in sequence ", f.seq) : std::string(), f.token >= 0 ? cat(" at token ", f.token) : std::string(),
             ": NMSE ", sci(f.nmse), " > ", sci(max_nmse), ", max |diff| ", sci(f.max_abs_diff), " over ", f.count,
             " values");
}

void verify_step(Backend& tested, PreparedPlan& tested_plan, Backend& reference, PreparedPlan& reference_plan,
                 const StepInput& step, int64_t step_index, const VerifyOptions& options, VerifyReport& report) {
  const Plan& plan = reference_plan.plan();
  GRETA_CHECK(tested_plan.plan().ops.size() == plan.ops.size(), "verify: the two plans differ");
  std::vector<float> got, want;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    tested.execute(tested_plan, step, {i, i + 1});
    reference.execute(reference_plan, step, {i, i + 1});

    const PlanOp& op = plan.ops[i];
    const std::vector<BufferRegion> regions = written_regions(op, step);
    // The worst row (by squared error) names the token, and through the step's sequence rows, the sequence.
    const int64_t rows = op.kind() == OpKind::KvWrite ? int64_t(regions.size()) : row_count(op);
    double err = 0, ref = 0, max_abs = 0, worst_row_err = -1;
    int64_t count = 0, worst_row = -1, done = 0;
    for (const BufferRegion& region : regions) {
      got.resize(size_t(region.count));
      want.resize(size_t(region.count));
      tested.read(tested_plan, region.buffer, region.offset, got);
      reference.read(reference_plan, region.buffer, region.offset, want);
      const int64_t per_row = rows > 0 ? std::max<int64_t>(1, (op.kind() == OpKind::KvWrite ? region.count
                                                                                              : region.count / rows))
                                       : region.count;
      double row_err = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        const double d = double(got[k]) - double(want[k]);
        err += d * d;
        row_err += d * d;
        ref += double(want[k]) * double(want[k]);
        max_abs = std::max(max_abs, std::fabs(d));
        if (std::isnan(d)) max_abs = d, row_err = INFINITY;  // NaN anywhere must show (fabs/max would hide it)
        if ((int64_t(k) + 1) % per_row == 0 || k + 1 == got.size()) {
          const int64_t row = (done + int64_t(k)) / per_row;
          if (row_err > worst_row_err) worst_row_err = row_err, worst_row = row;
          row_err = 0;
        }
      }
      done += region.count;
      count += region.count;
      if (options.resync) tested.write(tested_plan, region.buffer, region.offset, want);
    }
    OpCheck check;
    check.step = step_index;
    check.op_index = i;
    check.label = op.label;
    check.layer = op.layer;
    check.kind = op.kind();
    check.count = count;
    check.token = worst_row;
    // An expert matmul's rows are (token, slot) pairs: name the token and the slot's expert (the reference's id).
    if (const auto* mm = std::get_if<MoeMatMulOp>(&op.op); mm && worst_row >= 0) {
      check.token = worst_row / mm->k;
      float id = -1;
      reference.read(reference_plan, mm->experts, worst_row, std::span<float>(&id, 1));
      check.expert = int64_t(id);
    }
    check.seq = check.token >= 0 && check.token < int64_t(step.seq.size()) &&
                        (int64_t(step.seq.size()) == rows || check.expert >= 0)
                    ? step.seq[size_t(check.token)]
                    : -1;
    check.nmse = ref > 0 ? err / ref : err;
    check.max_abs_diff = max_abs;
    check.ok = check.nmse <= options.max_nmse;  // false for NaN
    if (!std::isnan(check.nmse)) report.worst_nmse = std::max(report.worst_nmse, check.nmse);
    else report.worst_nmse = check.nmse;
    if (!check.ok && !report.first_failure) report.first_failure = check;
    report.checks.push_back(std::move(check));
  }
}

VerifyReport verify(const model::ModelConfig& config, const ModelWeights& weights, Backend& tested, Backend& reference,
                    std::span<const TokenId> tokens, const VerifyOptions& options) {
  const int64_t n = int64_t(tokens.size());
  if (n == 0) fail("verify: no tokens");
  for (TokenId t : tokens)
    if (t < 0 || t >= config.vocab_size) fail("verify: token id ", t, " is outside the vocabulary (", config.vocab_size, ")");
  const int64_t decode_steps = std::clamp<int64_t>(options.decode_steps, 0, n - 1);
  const int64_t prefill = n - decode_steps;

  VerifyReport report;
  report.tested = tested.name();
  report.reference = reference.name();
  report.max_nmse = options.max_nmse;
  tested.load_weights(weights.table);
  reference.load_weights(weights.table);

  const Plan prefill_plan = build_plan(config, weights, PlanShape::single(prefill, n, true, options.kv_type));
  auto tested_prefill = tested.prepare(prefill_plan);
  auto reference_prefill = reference.prepare(prefill_plan);
  const StepArrays first = single_sequence_step(prefill_plan, tokens.first(size_t(prefill)), 0);
  verify_step(tested, *tested_prefill, reference, *reference_prefill, first.view(), 0, options, report);

  if (decode_steps > 0) {
    const Plan decode_plan = build_plan(config, weights, PlanShape::single(1, n, false, options.kv_type));
    auto tested_decode = tested.prepare(decode_plan);
    auto reference_decode = reference.prepare(decode_plan);
    for (int64_t s = 0; s < decode_steps; ++s) {
      const int64_t pos = prefill + s;
      const StepArrays one = single_sequence_step(decode_plan, tokens.subspan(size_t(pos), 1), pos);
      verify_step(tested, *tested_decode, reference, *reference_decode, one.view(), s + 1, options, report);
    }
  }
  return report;
}

}  // namespace greta::engine
