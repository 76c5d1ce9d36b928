// Runs one golden case (../shared/golden) on a backend and measures it against llama.cpp's reference: tokenization,
// prompt-logit NMSE per row and the greedy continuation. Shared by the CPU golden test (tests/engine/golden_test.cpp,
// where the tolerances are explained) and the Vulkan one (tests/vk/vk_golden_test.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <span>

#include "engine/engine.h"
#include "engine/golden.h"  // tests/engine/golden.h
#include "test_util.h"

namespace greta::test {

using engine::Backend;
using engine::Engine;
using engine::EngineOptions;
using engine::TokenId;

inline constexpr double kMarginForTies = 0.1;

// The NMSE limit for a model: the loosest class among its weight matrices' types. The class follows the activation
// rounding llama.cpp's CPU backend applies before the dot product (golden_test.cpp explains the classes): IQ4_NL and
// MXFP4 take Q8_0 activations, like the legacy quants (IQ4_NL's worst row: 1.8e-4 on the CPU, 2.1e-4 on Vulkan);
// IQ4_XS takes Q8_K activations, like the K-quants (5.1e-4 on the CPU, 5.5e-4 on Vulkan, 5.7e-4 with a q8_0 KV cache).
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
      case model::GgmlType::Q5_1:
      case model::GgmlType::IQ4_NL:
      case model::GgmlType::MXFP4: l = 2e-3; break;
      default: l = 3e-3; break;  // K-quants, IQ4_XS
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

// The limit with a KV cache of `kv_type`: an f16 cache rounds K and V like F16 weights round theirs, so models whose
// weights are more exact than F16 get the F16 class (NMSE measured here ~1e-7..3e-7 on the F32 models).
// A q8_0 cache rounds K and V to 8 bits per 32 values, as Q8_0 weights do: their class.
inline double kv_nmse_limit(double weight_limit, engine::ElemType kv_type) {
  if (kv_type == engine::ElemType::Q8_0) return std::max(weight_limit, 2e-3);
  return kv_type == engine::ElemType::F16 ? std::max(weight_limit, 5e-6) : weight_limit;
}

// The KV types a model can use: q8_0 needs K and V rows of a multiple of 32 elements.
inline std::vector<engine::ElemType> kv_types_for(const std::string& model_path) {
  // The next/ files that only add a weight type to an architecture another file covers (IQ4 llama, MXFP4 gpt-oss)
  // run their concurrent sequences with the default f16 cache: the KV types are that architecture's file's test.
  for (const char* variant : {"synth-llama-d256-iq4_", "synth-gptoss-d128-mxfp4"})
    if (model_path.find(variant) != std::string::npos) return {engine::ElemType::F16};
  const model::ModelConfig c = model::ModelConfig::from_gguf(model::GgufFile::open(model_path));
  std::vector<engine::ElemType> types = {engine::ElemType::F32, engine::ElemType::F16};
  if ((c.n_kv_heads * c.head_dim) % 32 == 0 && (c.n_kv_heads * c.head_dim_v) % 32 == 0)
    types.push_back(engine::ElemType::Q8_0);
  return types;
}

// Prompt-logit NMSE per row, overall, and the largest difference.
inline void score_prompt(const GoldenCase& g, std::span<const float> logits, GoldenResult& r) {
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
}

// One greedy step: false when the continuation has ended (a difference, or the last reference token).
inline bool greedy_step(const GoldenCase& g, std::span<const float> step_logits, size_t i, GoldenResult& r,
                        TokenId& next) {
  const TokenId ours = engine::argmax(step_logits), ref = g.greedy_tokens[i];
  if (ours != ref) {
    // Allowed only as a near tie on both sides: the reference's margin and our own preference for our token.
    r.greedy_stopped_at = int64_t(i);
    r.greedy_ok = g.greedy_margins[i] < r.tie_margin && step_logits[size_t(ours)] - step_logits[size_t(ref)] < r.tie_margin;
    return false;
  }
  ++r.greedy_compared;
  next = ours;
  return i + 1 < g.greedy_tokens.size();
}

inline GoldenResult run_golden(const GoldenCase& g, std::unique_ptr<Backend> backend,
                               engine::ElemType kv_type = engine::ElemType::F32) {
  Engine engine =
      Engine::open(g.model_path, std::move(backend), EngineOptions{.ctx = 96, .max_batch = 64, .kv_type = kv_type});
  GoldenResult r;
  r.limit = kv_nmse_limit(logits_nmse_limit(engine.file()), kv_type);
  REQUIRE(engine.vocab_size() == g.n_vocab);
  r.tokenization_ok = engine.tokenizer().encode(g.prompt, g.add_bos) == g.prompt_tokens;

  const std::vector<float> logits = engine.prefill_all_logits(g.prompt_tokens);
  score_prompt(g, logits, r);
  // Greedy continuation from the prefilled prompt, one decode step per token.
  std::vector<float> step_logits(logits.end() - g.n_vocab, logits.end());
  TokenId next = 0;
  for (size_t i = 0; greedy_step(g, step_logits, i, r, next); ++i) {
    const auto out = engine.decode(next);
    step_logits.assign(out.begin(), out.end());
  }
  return r;
}

// The golden cases of one model (its two prompts) as concurrent sequences beside six others in one engine: the
// others (random prompts of 3..40 tokens, one sharing a golden prompt's first tokens) join at different steps and
// finish at different steps, decoding random tokens. Each golden sequence is scored as run_golden scores it.
inline std::vector<GoldenResult> run_golden_batched(const std::vector<GoldenCase>& cases,
                                                    std::unique_ptr<Backend> backend, engine::ElemType kv_type) {
  using engine::LogitsWanted;
  using engine::SeqId;
  Engine e = Engine::open(cases.at(0).model_path, std::move(backend),
                          EngineOptions{.ctx = 96, .max_batch = 64, .max_seqs = 8, .kv_type = kv_type});
  std::mt19937 rng(99);
  const auto random_tokens = [&](size_t n) {
    std::vector<TokenId> p(n);
    for (auto& t : p) t = TokenId(1 + rng() % uint32_t(e.vocab_size() - 1));
    return p;
  };
  struct Seq {
    const GoldenCase* golden = nullptr;
    int join = 0, decode = 0;
    SeqId id = -1;
    std::vector<TokenId> feed;
    size_t greedy_i = 0;
    bool done = false;
    GoldenResult result;
  };
  std::vector<Seq> seqs;
  const auto add = [&](const GoldenCase* golden, int join, int decode) {
    seqs.emplace_back();
    seqs.back().golden = golden;
    seqs.back().join = join;
    seqs.back().decode = decode;
  };
  for (size_t c = 0; c < cases.size(); ++c) add(&cases[c], int(c), 0);
  const int joins[] = {0, 0, 1, 2, 3, 5}, decodes[] = {9, 3, 20, 6, 1, 12};
  for (int k = 0; k < 6; ++k) add(nullptr, joins[k], decodes[k]);
  for (int step = 0; step < 64; ++step) {
    std::vector<engine::StepEntry> entries;
    std::vector<Seq*> who;
    for (Seq& s : seqs) {
      if (s.done || s.join > step) continue;
      if (s.id < 0) {
        s.id = e.new_sequence();
        if (s.golden) {
          s.result.limit = kv_nmse_limit(logits_nmse_limit(e.file()), kv_type);
          s.result.tokenization_ok = e.tokenizer().encode(s.golden->prompt, s.golden->add_bos) == s.golden->prompt_tokens;
          s.feed = s.golden->prompt_tokens;
        } else {
          s.feed = &s == &seqs[cases.size()] ? cases[0].prompt_tokens : random_tokens(3 + rng() % 38);
          if (&s == &seqs[cases.size()]) s.feed.push_back(random_tokens(1)[0]);  // a golden prompt, then its own
        }
      }
      const bool all = s.golden && s.greedy_i == 0 && e.sequence_tokens(s.id).empty();
      entries.push_back({s.id, s.feed, all ? LogitsWanted::All : LogitsWanted::Last});
      who.push_back(&s);
    }
    if (who.empty()) break;
    const engine::StepLogits& out = e.step(entries);
    for (size_t i = 0; i < who.size(); ++i) {
      Seq& s = *who[i];
      if (!s.golden) {
        s.feed = random_tokens(1);
        if (s.decode-- == 0) s.done = true, e.release_sequence(s.id);
        continue;
      }
      if (entries[i].logits == LogitsWanted::All) score_prompt(*s.golden, out.all_rows(i), s.result);
      TokenId next = 0;
      if (greedy_step(*s.golden, out.row(i), s.greedy_i++, s.result, next)) {
        s.feed = {next};
      } else {
        s.done = true;
        e.release_sequence(s.id);
      }
    }
  }
  std::vector<GoldenResult> results;
  for (size_t c = 0; c < cases.size(); ++c) results.push_back(seqs[c].result);
  REQUIRE(e.kv_cache().used_pages() == 0);
  return results;
}

}  // namespace greta::test
