#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace greta::engine {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

TokenId argmax(std::span<const float> logits) {
  GRETA_CHECK(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return TokenId(best);
}

Sampler::Sampler(const SamplerParams& p) : params_(p), rng_(p.seed) {
  if (std::isnan(p.temperature)) fail("sampler: temperature is NaN");
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) fail("sampler: top-p ", p.top_p, " is outside (0, 1]");
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) fail("sampler: min-p ", p.min_p, " is outside [0, 1]");
  if (!(p.repeat_penalty > 0.f) || !std::isfinite(p.repeat_penalty))
    fail("sampler: repeat penalty ", p.repeat_penalty, " must be a positive number");
  if (!std::isfinite(p.frequency_penalty) || !std::isfinite(p.presence_penalty))
    fail("sampler: frequency/presence penalties must be finite");
  if (p.repeat_last_n < -1) fail("sampler: repeat-last-n ", p.repeat_last_n, " must be >= -1");
}

void Sampler::accept(TokenId token) {
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  // Keep the window bounded (and the whole-history mode bounded by memory: a context never exceeds 2^31 tokens).
  if (params_.repeat_last_n > 0 && history_.size() > size_t(params_.repeat_last_n) * 2)
    history_.erase(history_.begin(), history_.end() - params_.repeat_last_n);
}

void Sampler::reset() {
  history_.clear();
  rng_ = Rng(params_.seed);
}

void Sampler::penalized_logits(size_t vocab) {
  penalized_.clear();
  const bool active = params_.repeat_penalty != 1.f || params_.frequency_penalty != 0.f ||
                      params_.presence_penalty != 0.f;
  if (!active || history_.empty() || params_.repeat_last_n == 0) return;
  const size_t window = params_.repeat_last_n < 0 ? history_.size()
                                                  : std::min(history_.size(), size_t(params_.repeat_last_n));
  std::vector<TokenId> ids(history_.end() - ptrdiff_t(window), history_.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    if (ids[i] >= 0 && size_t(ids[i]) < vocab) penalized_.push_back({ids[i], double(j - i)});  // count for now
    i = j;
  }
}

void Sampler::gather_candidates(std::span<const float> logits, std::vector<Candidate>& c) {
  const size_t n = logits.size();
  penalized_logits(n);
  for (auto& [id, value] : penalized_) {  // value holds the token's count in the window until here
    double logit = logits[size_t(id)];
    logit = logit > 0 ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
    value = logit - (value * params_.frequency_penalty + double(params_.presence_penalty));
  }
  const auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  c.clear();
  const bool top_k = params_.top_k > 0 && size_t(params_.top_k) < n;
  const size_t k = top_k ? size_t(params_.top_k) : n;
  double worst = -INFINITY;  // with a full heap: the logit of its worst entry (anything lower cannot enter)
  size_t next_penalized = 0;  // penalized_ is in id order
  for (size_t i = 0; i < n; ++i) {
    const float f = logits[i];
    if (std::isnan(f)) fail("sampler: the logit of token ", i, " is NaN");
    double v = f;
    if (next_penalized < penalized_.size() && size_t(penalized_[next_penalized].first) == i)
      v = penalized_[next_penalized++].second;
    if (!top_k) {
      c.push_back({TokenId(i), v});
    } else if (c.size() < k) {
      c.push_back({TokenId(i), v});
      std::push_heap(c.begin(), c.end(), better);  // the worst kept on top
      if (c.size() == k) worst = c.front().logit;
    } else if (v >= worst && better({TokenId(i), v}, c.front())) {
      std::pop_heap(c.begin(), c.end(), better);
      c.back() = {TokenId(i), v};
      std::push_heap(c.begin(), c.end(), better);
      worst = c.front().logit;
    }
  }
  if (top_k) std::sort_heap(c.begin(), c.end(), better);  // ascending in `better`'s order: best first
  else std::sort(c.begin(), c.end(), better);
}

TokenId Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) fail("sampler: no logits");
  if (params_.temperature <= 0.f) {
    // Greedy: the highest (penalized) logit, the lowest id on ties.
    penalized_logits(logits.size());
    for (size_t k = 0; k < penalized_.size(); ++k) {
      auto& [id, value] = penalized_[k];
      double logit = logits[size_t(id)];
      logit = logit > 0 ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
      value = logit - (value * params_.frequency_penalty + double(params_.presence_penalty));
    }
    size_t next_penalized = 0;
    TokenId best = -1;
    double best_value = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isnan(logits[i])) fail("sampler: the logit of token ", i, " is NaN");
      double v = logits[i];
      if (next_penalized < penalized_.size() && size_t(penalized_[next_penalized].first) == i)
        v = penalized_[next_penalized++].second;
      if (best < 0 || v > best_value) best = TokenId(i), best_value = v;
    }
    return best;
  }
  std::vector<Candidate>& c = candidates_;
  gather_candidates(logits, c);

  // Softmax of the survivors (before temperature, as llama.cpp's chain orders it).
  const auto probabilities = [&c] {
    std::vector<double> p(c.size());
    double sum = 0;
    const bool finite_max = std::isfinite(c[0].logit);  // +-inf maximum: the tied maxima share the mass
    for (size_t i = 0; i < c.size(); ++i)
      sum += (p[i] = finite_max ? std::exp(c[i].logit - c[0].logit) : (c[i].logit == c[0].logit ? 1.0 : 0.0));
    for (double& x : p) x /= sum;
    return p;
  };

  if (params_.top_p < 1.f) {
    const std::vector<double> p = probabilities();
    double cumulative = 0;
    size_t n = 0;
    while (n < c.size()) {
      cumulative += p[n++];
      if (cumulative >= params_.top_p) break;
    }
    c.resize(std::max<size_t>(n, 1));
  }

  if (params_.min_p > 0.f) {
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + ln(min_p)
    const double threshold = c[0].logit + std::log(double(params_.min_p));
    size_t n = 1;
    while (n < c.size() && c[n].logit >= threshold) ++n;
    c.resize(n);
  }

  for (auto& x : c) x.logit /= double(params_.temperature);
  const std::vector<double> p = probabilities();
  const double u = rng_.uniform();
  double cumulative = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    cumulative += p[i];
    if (u < cumulative) return c[i].id;
  }
  return c.back().id;  // u within rounding of 1
}

}  // namespace greta::engine
