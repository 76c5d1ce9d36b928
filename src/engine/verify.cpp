#include "engine/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/model_config.h"

namespace greta::engine {

namespace {
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
             op_kind_name(f.kind), f.layer >= 0 ? cat(", layer ", f.layer) : std::string(), "): NMSE ", sci(f.nmse),
             " > ", sci(max_nmse), ", max |diff| ", sci(f.max_abs_diff), " over ", f.count, " values");
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
    const BufferRegion region = written_region(op, step);
    got.resize(size_t(region.count));
    want.resize(size_t(region.count));
    tested.read(tested_plan, region.buffer, region.offset, got);
    reference.read(reference_plan, region.buffer, region.offset, want);

    double err = 0, ref = 0, max_abs = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const double d = double(got[k]) - double(want[k]);
      err += d * d;
      ref += double(want[k]) * double(want[k]);
      max_abs = std::max(max_abs, std::fabs(d));
      if (std::isnan(d)) max_abs = d;  // NaN anywhere must show (fabs/max would hide it)
    }
    OpCheck check;
    check.step = step_index;
    check.op_index = i;
    check.label = op.label;
    check.layer = op.layer;
    check.kind = op.kind();
    check.count = region.count;
    check.nmse = ref > 0 ? err / ref : err;
    check.max_abs_diff = max_abs;
    check.ok = check.nmse <= options.max_nmse;  // false for NaN
    if (!std::isnan(check.nmse)) report.worst_nmse = std::max(report.worst_nmse, check.nmse);
    else report.worst_nmse = check.nmse;
    if (!check.ok && !report.first_failure) report.first_failure = check;
    report.checks.push_back(std::move(check));

    if (options.resync) tested.write(tested_plan, region.buffer, region.offset, want);
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

  const Plan prefill_plan = build_plan(config, weights, PlanShape{prefill, n, true});
  auto tested_prefill = tested.prepare(prefill_plan);
  auto reference_prefill = reference.prepare(prefill_plan);
  verify_step(tested, *tested_prefill, reference, *reference_prefill, StepInput{tokens.first(size_t(prefill)), 0}, 0,
              options, report);

  if (decode_steps > 0) {
    const Plan decode_plan = build_plan(config, weights, PlanShape{1, n, false});
    auto tested_decode = tested.prepare(decode_plan);
    auto reference_decode = reference.prepare(decode_plan);
    for (int64_t s = 0; s < decode_steps; ++s) {
      const int64_t pos = prefill + s;
      verify_step(tested, *tested_decode, reference, *reference_decode,
                  StepInput{tokens.subspan(size_t(pos), 1), pos}, s + 1, options, report);
    }
  }
  return report;
}

}  // namespace greta::engine
