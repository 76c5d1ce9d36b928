// The sampler: a pinned RNG sequence, determinism per seed, and the effect of every option.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;

namespace {

SamplerParams plain(float temperature, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.seed = seed;
  return p;
}

std::map<TokenId, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<TokenId, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits)];
  return h;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double mx = -INFINITY, z = 0;
  for (float l : logits) mx = std::max(mx, double(l));
  for (size_t i = 0; i < p.size(); ++i) z += (p[i] = std::exp((logits[i] - mx) / temperature));
  for (double& x : p) x /= z;
  return p;
}

}  // namespace

TEST_CASE("rng: the xoshiro256** sequence is pinned (the same on every machine)") {
  // Reference values from an independent implementation of splitmix64 seeding + xoshiro256**.
  Rng a(42);
  CHECK(a.next() == 0x15780b2e0c2ec716ull);
  CHECK(a.next() == 0x6104d9866d113a7eull);
  CHECK(a.next() == 0xae17533239e499a1ull);
  Rng b(0);
  CHECK(b.next() == 0x99ec5f36cb75f2b4ull);
  Rng c(7);
  for (int i = 0; i < 10000; ++i) {
    const double u = c.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
}

TEST_CASE("greedy: argmax after penalties, lowest id on ties") {
  Sampler s(SamplerParams::greedy());
  CHECK(s.sample(std::vector<float>{0.1f, 3.f, -2.f, 2.9f}) == 1);
  CHECK(s.sample(std::vector<float>{1.f, 5.f, 5.f, 0.f}) == 1);
  CHECK(argmax(std::vector<float>{1.f, 5.f, 5.f, 0.f}) == 1);
  const auto logits = test::random_floats(1001, 3, -5.f, 5.f);
  CHECK(s.sample(logits) == argmax(logits));
}

TEST_CASE("same seed, same samples; reset restarts; another seed differs") {
  const auto logits = test::random_floats(301, 5, -2.f, 2.f);
  SamplerParams p;  // the default chain: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<TokenId> first;
  for (int i = 0; i < 200; ++i) {
    first.push_back(a.sample(logits));
    CHECK(b.sample(logits) == first.back());
  }
  a.reset();
  for (int i = 0; i < 200; ++i) CHECK(a.sample(logits) == first[size_t(i)]);
  p.seed = 1235;
  Sampler c(p);
  std::vector<TokenId> other;
  for (int i = 0; i < 200; ++i) other.push_back(c.sample(logits));
  CHECK(other != first);
  CHECK(std::set<TokenId>(first.begin(), first.end()).size() > 5);  // it does sample, not just argmax
}

TEST_CASE("temperature: frequencies follow softmax(logits / T); lower T concentrates") {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    CAPTURE(t);
    Sampler s(plain(t, 99));
    const int draws = 40000;
    const auto h = histogram(s, logits, draws);
    const auto p = softmax(logits, t);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double freq = double(h.count(TokenId(i)) ? h.at(TokenId(i)) : 0) / draws;
      // 5 standard deviations of a binomial proportion
      CHECK(std::fabs(freq - p[i]) <= 5 * std::sqrt(p[i] * (1 - p[i]) / draws) + 1e-3);
    }
  }
}

TEST_CASE("top-k, top-p and min-p keep exactly the tokens they should") {
  // Probabilities at T = 1: 0.5, 0.3, 0.15, 0.05 (logits are their logs).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto support = [&](SamplerParams p) {
    Sampler s(p);
    std::set<TokenId> seen;
    for (int i = 0; i < 4000; ++i) seen.insert(s.sample(logits));
    return seen;
  };
  CHECK(support(plain(1.f)) == std::set<TokenId>{0, 1, 2, 3});
  SamplerParams k = plain(1.f);
  k.top_k = 1;
  CHECK(support(k) == std::set<TokenId>{0});
  k.top_k = 2;
  CHECK(support(k) == std::set<TokenId>{0, 1});
  SamplerParams tp = plain(1.f);
  tp.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: the second token completes the mass
  CHECK(support(tp) == std::set<TokenId>{0, 1});
  tp.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95
  CHECK(support(tp) == std::set<TokenId>{0, 1, 2});
  tp.top_p = 0.4f;  // the first token alone
  CHECK(support(tp) == std::set<TokenId>{0});
  SamplerParams mp = plain(1.f);
  mp.min_p = 0.5f;  // p >= 0.25: tokens 0 and 1
  CHECK(support(mp) == std::set<TokenId>{0, 1});
  mp.min_p = 0.2f;  // p >= 0.1
  CHECK(support(mp) == std::set<TokenId>{0, 1, 2});
  // Filters use the untempered probabilities: a high temperature does not widen top-p's choice.
  tp.top_p = 0.75f;
  tp.temperature = 5.f;
  CHECK(support(tp) == std::set<TokenId>{0, 1});
}

TEST_CASE("repetition, frequency and presence penalties") {
  SamplerParams p = SamplerParams::greedy();
  p.repeat_penalty = 1.1f;
  {
    Sampler s(p);
    const std::vector<float> positive = {2.0f, 1.9f, 0.f};
    CHECK(s.sample(positive) == 0);
    s.accept(0);  // 2.0 / 1.1 = 1.82 < 1.9
    CHECK(s.sample(positive) == 1);
    const std::vector<float> negative = {-1.0f, -1.05f, -3.f};
    CHECK(s.sample(negative) == 1);  // -1.0 * 1.1 = -1.1 < -1.05
  }
  {
    SamplerParams f = SamplerParams::greedy();
    f.frequency_penalty = 0.2f;
    Sampler s(f);
    const std::vector<float> logits = {2.0f, 1.5f};
    s.accept(0);
    CHECK(s.sample(logits) == 0);  // 2.0 - 0.2 = 1.8
    s.accept(0);
    s.accept(0);
    CHECK(s.sample(logits) == 1);  // 2.0 - 0.6 = 1.4
  }
  {
    SamplerParams pr = SamplerParams::greedy();
    pr.presence_penalty = 0.6f;
    Sampler s(pr);
    s.accept(0);
    CHECK(s.sample(std::vector<float>{2.0f, 1.5f}) == 1);  // 1.4 < 1.5
    CHECK(s.sample(std::vector<float>{2.0f, 1.3f}) == 0);  // once, however often it occurred
  }
  {
    SamplerParams w = SamplerParams::greedy();
    w.repeat_penalty = 2.f;
    w.repeat_last_n = 2;
    Sampler s(w);
    s.accept(0);
    s.accept(5);
    s.accept(6);  // token 0 has left the window of 2
    CHECK(s.sample(std::vector<float>{2.0f, 1.5f}) == 0);
    s.reset();
    s.accept(0);
    CHECK(s.sample(std::vector<float>{2.0f, 1.5f}) == 1);
  }
}

TEST_CASE("bad parameters and NaN logits are errors") {
  SamplerParams p;
  p.top_p = 0.f;
  CHECK_THROWS_AS(Sampler{p}, Error);
  p = SamplerParams{};
  p.min_p = 1.5f;
  CHECK_THROWS_AS(Sampler{p}, Error);
  p = SamplerParams{};
  p.repeat_penalty = 0.f;
  CHECK_THROWS_AS(Sampler{p}, Error);
  p = SamplerParams{};
  p.temperature = NAN;
  CHECK_THROWS_AS(Sampler{p}, Error);
  p = SamplerParams{};
  p.repeat_last_n = -2;
  CHECK_THROWS_AS(Sampler{p}, Error);
  Sampler s{SamplerParams{}};
  CHECK_THROWS_AS(s.sample(std::vector<float>{1.f, NAN}), Error);
  CHECK_THROWS_AS(s.sample(std::vector<float>{}), Error);
  // Infinite logits are legal (masking): -inf never wins, +inf always does.
  CHECK(s.sample(std::vector<float>{-INFINITY, 0.f, -INFINITY}) == 1);
  CHECK(s.sample(std::vector<float>{0.f, INFINITY, 3.f}) == 1);
}
