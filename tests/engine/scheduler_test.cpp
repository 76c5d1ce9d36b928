// The scheduler (engine/scheduler.h) as the server drives it: requests submitted while others run, n choices as
// forks (each equal to a run alone with seed + choice), cancellation freeing pages at once, prompts kept for reuse by
// later requests (and given back when admission needs the pages), log-probabilities, stop strings, and requests that
// fail alone.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;

namespace {

Engine open_engine(EngineOptions options) {
  return Engine::open(test::shared_path("models/stories260K-q8_0.gguf"),
                      std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{2}), options);
}

// What one request produced, collected from its events.
struct Collected {
  std::map<int32_t, std::vector<TokenId>> tokens;
  std::map<int32_t, std::string> text;
  std::map<int32_t, StopReason> stop;
  std::vector<RequestEvent> token_events;
  RequestUsage usage;
  std::string error;
  bool finished = false;
  int events_after_end = 0;
};

RequestSink collect(Collected& c) {
  return [&c](const RequestEvent& ev) {
    if (c.finished || !c.error.empty()) ++c.events_after_end;
    switch (ev.kind) {
      case RequestEvent::Kind::Token:
        c.tokens[ev.choice].push_back(ev.token);
        c.text[ev.choice] += ev.text;
        c.token_events.push_back(ev);
        break;
      case RequestEvent::Kind::ChoiceDone:
        c.text[ev.choice] += ev.text;
        c.stop[ev.choice] = ev.stop;
        break;
      case RequestEvent::Kind::Finished:
        c.usage = ev.usage;
        c.finished = true;
        break;
      case RequestEvent::Kind::Failed:
        c.error = ev.error;
        break;
    }
  };
}

void run_until_idle(Scheduler& s, int max_steps = 10000) {
  for (int i = 0; i < max_steps && !s.idle(); ++i) s.step();
  REQUIRE(s.idle());
}

std::vector<TokenId> prompt_of(int seed, size_t n) {
  std::vector<TokenId> p = {1};
  for (size_t i = 1; i < n; ++i) p.push_back(TokenId(2 + (seed * 131 + int(i) * 17) % 500));
  return p;
}

GenerateResult alone(const std::vector<TokenId>& prompt, const GenerateOptions& options) {
  Engine e = open_engine({.ctx = 256});
  return e.generate(prompt, options);
}

}  // namespace

TEST_CASE("scheduler: n choices are forks of one prompt; choice i equals a run alone with seed + i") {
  Engine e = open_engine({.ctx = 256, .max_seqs = 4});
  Scheduler s(e, {.parallel = 4, .retain_prompts = 0});
  const auto prompt = prompt_of(3, 45);  // a full page and a partial one: forks share one, recompute the other
  GenerateOptions opt;
  opt.max_tokens = 12;
  opt.sampling = SamplerParams{.temperature = 0.9f, .seed = 77};
  Collected c;
  s.submit({.prompt = prompt, .options = opt, .n = 3}, collect(c));
  run_until_idle(s);
  REQUIRE(c.finished);
  CHECK(c.events_after_end == 0);
  CHECK(c.usage.prompt_tokens == 45);
  int64_t total = 0;
  for (int32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    GenerateOptions one = opt;
    one.sampling.seed = 77 + uint64_t(i);
    const GenerateResult want = alone(prompt, one);
    CHECK(c.tokens[i] == want.tokens);
    CHECK(c.text[i] == want.text);
    total += int64_t(c.tokens[i].size());
  }
  CHECK(c.tokens[0] != c.tokens[1]);  // different seeds, different samples (at this temperature)
  CHECK(c.usage.completion_tokens == total);
  CHECK(e.kv_cache().used_pages() == 0);
}

TEST_CASE("scheduler: requests arriving while others run; cancel frees pages now; prompts kept for reuse") {
  Engine e = open_engine({.ctx = 256, .max_batch = 32, .max_seqs = 4});
  Scheduler s(e, {.parallel = 3, .retain_prompts = 2});
  const auto system = prompt_of(9, 70);  // two full pages shared by the requests below
  GenerateOptions opt;
  opt.max_tokens = 10;
  opt.sampling = SamplerParams::greedy();

  Collected first, cancelled;
  s.submit({.prompt = system, .options = opt}, collect(first));
  GenerateOptions long_opt = opt;
  long_opt.max_tokens = 200;
  const RequestId victim = s.submit({.prompt = prompt_of(4, 20), .options = long_opt}, collect(cancelled));
  for (int i = 0; i < 8; ++i) s.step();
  CHECK(s.stats().running == 2);
  CHECK(s.stats().running_sequences == 2);
  const int64_t before = s.stats().kv_pages_running;
  s.cancel(victim);
  CHECK(s.stats().kv_pages_running < before);
  const int64_t tokens_seen = int64_t(cancelled.tokens[0].size());
  run_until_idle(s);
  CHECK(int64_t(cancelled.tokens[0].size()) == tokens_seen);  // nothing after the cancel
  CHECK_FALSE(cancelled.finished);
  REQUIRE(first.finished);
  CHECK(first.tokens[0] == alone(system, opt).tokens);

  // The finished prompt's two full pages stay for the next request with the same start.
  CHECK(s.stats().kv_pages_running == 0);
  CHECK(s.stats().kv_pages_retained == 2);
  auto longer = system;
  for (TokenId t : prompt_of(5, 12)) longer.push_back(t);
  Collected second;
  s.submit({.prompt = longer, .options = opt}, collect(second));
  run_until_idle(s);
  REQUIRE(second.finished);
  CHECK(second.usage.cached_tokens == 64);
  CHECK(second.usage.prompt_tokens == int64_t(longer.size()));
  CHECK(second.tokens[0] == alone(longer, opt).tokens);
}

TEST_CASE("scheduler: kept prompts are given back when an admission needs their pages") {
  Engine probe = open_engine({.ctx = 128});
  const uint64_t per_page = probe.kv_bytes_per_page();
  // 8 pages: a request of 128 positions takes 4; two kept prompts of 2 pages each must be evicted for two of them.
  Engine e = open_engine({.ctx = 128, .max_seqs = 2, .kv_budget = 9 * per_page});
  Scheduler s(e, {.parallel = 2, .retain_prompts = 4});
  GenerateOptions opt;
  opt.max_tokens = 4;
  opt.sampling = SamplerParams::greedy();
  for (int i = 0; i < 3; ++i) {
    Collected c;
    s.submit({.prompt = prompt_of(20 + i, 66), .options = opt}, collect(c));
    run_until_idle(s);
    REQUIRE(c.finished);
  }
  CHECK(s.stats().kv_pages_retained > 0);
  GenerateOptions big = opt;
  big.max_tokens = 100;  // 110 positions: 4 pages each
  Collected a, b;
  s.submit({.prompt = prompt_of(30, 10), .options = big}, collect(a));
  s.submit({.prompt = prompt_of(31, 10), .options = big}, collect(b));
  s.step();
  CHECK(s.stats().running == 2);  // both admitted at once: the kept pages made way
  run_until_idle(s);
  CHECK(a.finished);
  CHECK(b.finished);
}

TEST_CASE("scheduler: requests that cannot run fail alone; stop strings end a choice and are never released") {
  Engine e = open_engine({.ctx = 64, .max_seqs = 4});
  Scheduler s(e, {.parallel = 2, .retain_prompts = 0});
  GenerateOptions opt;
  opt.max_tokens = 40;
  opt.sampling = SamplerParams::greedy();
  const auto prompt = prompt_of(1, 8);
  const GenerateResult full = alone(prompt, opt);
  REQUIRE(full.text.size() > 8);
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  Collected empty, too_long, too_many, stopped;
  s.submit({.prompt = {}, .options = opt}, collect(empty));
  s.submit({.prompt = prompt_of(2, 80), .options = opt}, collect(too_long));
  s.submit({.prompt = prompt, .options = opt, .n = 3}, collect(too_many));
  GenerateOptions with_stop = opt;
  with_stop.stop = {stop};
  s.submit({.prompt = prompt, .options = with_stop}, collect(stopped));
  run_until_idle(s);
  CHECK(empty.error.find("empty") != std::string::npos);
  CHECK(too_long.error.find("context") != std::string::npos);
  CHECK(too_many.error.find("n = 3") != std::string::npos);
  REQUIRE(stopped.finished);
  CHECK(stopped.stop[0] == StopReason::StopString);
  CHECK(stopped.text[0] == full.text.substr(0, full.text.find(stop)));
  CHECK(e.kv_cache().used_pages() == 0);
}

TEST_CASE("scheduler: log-probabilities are the log-softmax of the logits; the top ones most likely first") {
  const std::vector<float> logits = {1.f, 3.f, -2.f, 3.f, 0.5f};
  std::vector<TokenLogprob> top;
  double z = 0;
  for (float v : logits) z += std::exp(double(v));
  const float lp = token_logprob(logits, 4, 3, top);
  CHECK(lp == doctest::Approx(0.5 - std::log(z)).epsilon(1e-6));
  REQUIRE(top.size() == 3);
  CHECK(top[0].token == 1);  // ties: the lower id first
  CHECK(top[1].token == 3);
  CHECK(top[2].token == 0);
  CHECK(top[0].logprob == doctest::Approx(3 - std::log(z)).epsilon(1e-6));

  Engine e = open_engine({.ctx = 128});
  Scheduler s(e, {.parallel = 1});
  Collected c;
  GenerateOptions opt;
  opt.max_tokens = 6;
  opt.sampling = SamplerParams::greedy();
  s.submit({.prompt = prompt_of(7, 5), .options = opt, .top_logprobs = 5}, collect(c));
  run_until_idle(s);
  REQUIRE(c.token_events.size() == 6);
  for (const RequestEvent& ev : c.token_events) {
    REQUIRE(ev.top.size() == 5);
    CHECK(ev.top[0].token == ev.token);  // greedy picks the most likely
    CHECK(ev.logprob == ev.top[0].logprob);
    CHECK(ev.logprob <= 0.f);
    double mass = 0;
    for (size_t k = 0; k < ev.top.size(); ++k) {
      mass += std::exp(double(ev.top[k].logprob));
      if (k > 0) CHECK(ev.top[k].logprob <= ev.top[k - 1].logprob);
    }
    CHECK(mass <= 1.0 + 1e-5);
  }
}
