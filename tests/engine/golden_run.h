// Runs one golden case (../shared/golden) on a backend and measures it against llama.cpp's reference: tokenization,
// prompt-logit NMSE per row and the greedy continuation. Shared by the CPU golden test (tests/engine/golden_test.cpp,
// where the tolerances are explained) and the Vulkan one (tests/vk/vk_golden_test.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/engine.h"
#include "engine/golden.h"  // tests/engine/golden.h
#include "test_util.h"

namespace greta::test {

using engine::Backend;
using engine::Engine;
using engine::EngineOptions;
using engine::TokenId;

inline constexpr double kMarginForTies = 0.1;

// The NMSE limit for a model: the loosest class among its weight matrices' types.
inline double logits_nmse_limit(const model::GgufFile& file) {
  double limit = 0;
  for (const auto& t : file.tensors()) {
    if (t.dims.size() < 2) continue;  // norms and biases are F32 in every model
    double l;
    switch (t.type) {
      case model::GgmlType::F32: l = 1e-9; break;
      case model::GgmlType::F16: l = 5e-6; break;
      case model::GgmlType::BF16: l = 2e-4; break;
      case model::GgmlType::Q8_0:
      case model::GgmlType::Q4_0:
      case model::GgmlType::Q4_1:
      case model::GgmlType::Q5_0:
      case model::GgmlType::Q5_1: l = 2e-3; break;
      default: l = 3e-3; break;  // K-quants
    }
    limit = std::max(limit, l);
  }
  return limit;
}

struct GoldenResult {
  double limit = 0;
  double worst_row_nmse = 0;
  int64_t worst_row = -1;
  double overall_nmse = 0;
  double max_abs_diff = 0;         // largest |ours - ref| over the prompt logits
  double tie_margin = 0;           // reference margins below this count as near ties
  bool tokenization_ok = false;
  int64_t greedy_compared = 0;     // steps whose tokens were compared and equal
  int64_t greedy_stopped_at = -1;  // first differing step (-1: none)
  bool greedy_ok = true;           // no difference at a step with a clear margin
  bool ok() const { return worst_row_nmse <= limit && tokenization_ok && greedy_ok; }
};

inline GoldenResult run_golden(const GoldenCase& g, std::unique_ptr<Backend> backend) {
  Engine engine = Engine::open(g.model_path, std::move(backend), EngineOptions{.ctx = 96, .max_batch = 64});
  GoldenResult r;
  r.limit = logits_nmse_limit(engine.file());
  REQUIRE(engine.vocab_size() == g.n_vocab);
  r.tokenization_ok = engine.tokenizer().encode(g.prompt, g.add_bos) == g.prompt_tokens;

  const std::vector<float> logits = engine.prefill_all_logits(g.prompt_tokens);
  REQUIRE(logits.size() == g.prompt_logits.size());
  for (size_t row = 0; row < g.prompt_tokens.size(); ++row) {
    const size_t at = row * size_t(g.n_vocab);
    const double e = nmse(logits.data() + at, g.prompt_logits.data() + at, size_t(g.n_vocab));
    if (!(e <= r.worst_row_nmse)) r.worst_row_nmse = e, r.worst_row = int64_t(row);  // NaN propagates as a failure
  }
  r.overall_nmse = nmse(logits.data(), g.prompt_logits.data(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    r.max_abs_diff = std::max(r.max_abs_diff, double(std::fabs(logits[i] - g.prompt_logits[i])));
  // A near tie: a margin that our measured logit error could flip (each of the two logits may be off by up to
  // max_abs_diff), and never less than the README's 0.1.
  r.tie_margin = std::max(kMarginForTies, 2 * r.max_abs_diff);

  // Greedy continuation from the prefilled prompt, one decode step per token.
  std::vector<float> step_logits(logits.end() - g.n_vocab, logits.end());
  for (size_t i = 0; i < g.greedy_tokens.size(); ++i) {
    const TokenId ours = engine::argmax(step_logits), ref = g.greedy_tokens[i];
    if (ours != ref) {
      // Allowed only as a near tie on both sides: the reference's margin and our own preference for our token.
      r.greedy_stopped_at = int64_t(i);
      r.greedy_ok = g.greedy_margins[i] < r.tie_margin &&
                    step_logits[size_t(ours)] - step_logits[size_t(ref)] < r.tie_margin;
      break;
    }
    ++r.greedy_compared;
    if (i + 1 < g.greedy_tokens.size()) {
      const auto next = engine.decode(ours);
      step_logits.assign(next.begin(), next.end());
    }
  }
  return r;
}

}  // namespace greta::test
