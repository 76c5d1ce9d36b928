#include "engine/batch.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>

#include "core/error.h"

namespace greta::engine {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Running {
  size_t request;
  SeqId seq;
  std::vector<TokenId> feed;  // tokens the next step appends (prompt chunk or the last sampled token)
  size_t prompt_done = 0;     // prompt tokens handed to the engine so far
  int64_t reserve = 0;        // positions the admission set aside for it (prompt + max_tokens)
  std::optional<Sampler> sampler;
  Clock::time_point admitted, first_token;
  bool has_first = false;
};

}  // namespace

std::vector<BatchResult> run_batch(Engine& engine, std::span<const BatchRequest> requests, const BatchOptions& options) {
  if (options.parallel < 1) fail("parallel sequences ", options.parallel, ": must be at least 1");
  std::vector<BatchResult> results(requests.size());
  std::deque<size_t> queue;
  for (size_t i = 0; i < requests.size(); ++i) queue.push_back(i);
  std::vector<Running> running;
  const int64_t ctx = engine.context_size(), budget = engine.kv_cache().max_pages() - 1;
  const auto finish = [&](Running& r, StopReason stop) {
    results[r.request].result.stop = stop;
    const auto now = Clock::now();
    Timings& t = results[r.request].result.timings;
    t.prefill_s = seconds_between(r.admitted, r.has_first ? r.first_token : now);
    t.decode_s = r.has_first ? seconds_between(r.first_token, now) : 0;
    t.decode_tokens = int64_t(results[r.request].result.tokens.size());
    engine.release_sequence(r.seq);
    if (options.on_done) options.on_done(r.request, results[r.request]);
  };
  const auto fail_request = [&](size_t i, std::string error) {
    results[i].error = std::move(error);
    if (options.on_done) options.on_done(i, results[i]);
  };
  // Positions set aside for running sequences beyond what they hold: admission keeps the budget for them.
  const auto reserved_pages = [&] {
    int64_t pages = 0;
    for (const Running& r : running)
      pages += engine.kv_cache().pages_for(r.reserve) - int64_t(engine.kv_cache().pages(r.seq).size());
    return pages;
  };

  std::vector<StepEntry> entries;
  std::vector<size_t> entry_of;  // running index per entry
  while (!queue.empty() || !running.empty()) {
    // Admit, in request order, while slots and pages allow.
    while (!queue.empty() && int64_t(running.size()) < options.parallel) {
      const size_t i = queue.front();
      const BatchRequest& req = requests[i];
      const int64_t n_prompt = int64_t(req.prompt.size());
      if (n_prompt == 0) {
        queue.pop_front();
        fail_request(i, "the prompt is empty");
        continue;
      }
      if (n_prompt > ctx) {
        queue.pop_front();
        fail_request(i, cat("the prompt has ", n_prompt, " tokens, more than the context of ", ctx));
        continue;
      }
      const int64_t reserve = req.options.max_tokens < 0 ? ctx : std::min(ctx, n_prompt + req.options.max_tokens);
      const int64_t pages = engine.kv_cache().pages_for(reserve);
      if (pages > budget) {
        queue.pop_front();
        fail_request(i, cat("the request needs ", reserve, " positions of KV cache; the budget holds ",
                            budget * engine.kv_cache().page_size()));
        continue;
      }
      if (pages > engine.kv_cache().available_pages() - reserved_pages()) break;  // wait for pages
      queue.pop_front();
      Running r;
      r.request = i;
      const auto [seq, reused] = engine.new_sequence_with_prefix(req.prompt);
      r.seq = seq;
      r.prompt_done = size_t(reused);
      r.reserve = reserve;
      r.sampler.emplace(req.options.sampling);
      for (TokenId t : req.prompt) r.sampler->accept(t);
      r.admitted = Clock::now();
      results[i].reused_tokens = reused;
      results[i].result.timings.prefill_tokens = n_prompt - reused;
      running.push_back(std::move(r));
    }
    if (running.empty()) {
      GRETA_CHECK(queue.empty(), "a request waits for pages with nothing running");
      break;
    }

    // One step: decode tokens first, then prompt chunks within max_batch tokens.
    entries.clear();
    entry_of.clear();
    int64_t tokens = 0;
    const int64_t max_tokens = engine.options().max_batch;
    for (size_t k = 0; k < running.size(); ++k) {
      Running& r = running[k];
      if (r.prompt_done < requests[r.request].prompt.size()) continue;
      entries.push_back({r.seq, r.feed, LogitsWanted::Last});
      entry_of.push_back(k);
      ++tokens;
    }
    for (size_t k = 0; k < running.size() && tokens < max_tokens; ++k) {
      Running& r = running[k];
      const auto& prompt = requests[r.request].prompt;
      if (r.prompt_done >= prompt.size()) continue;
      const size_t take = size_t(std::min<int64_t>(int64_t(prompt.size() - r.prompt_done), max_tokens - tokens));
      r.feed.assign(prompt.begin() + ptrdiff_t(r.prompt_done), prompt.begin() + ptrdiff_t(r.prompt_done + take));
      r.prompt_done += take;
      const bool last = r.prompt_done == prompt.size();
      entries.push_back({r.seq, r.feed, last ? LogitsWanted::Last : LogitsWanted::None});
      entry_of.push_back(k);
      tokens += int64_t(take);
    }
    const StepLogits& out = engine.step(entries);

    // Sample where a sequence's logits came back; finish what stops.
    std::vector<size_t> finished;
    for (size_t e = 0; e < entries.size(); ++e) {
      Running& r = running[entry_of[e]];
      if (entries[e].logits == LogitsWanted::None) continue;
      const BatchRequest& req = requests[r.request];
      GenerateResult& res = results[r.request].result;
      const int64_t max_new = req.options.max_tokens;
      if (max_new >= 0 && int64_t(res.tokens.size()) >= max_new) {
        finish(r, StopReason::MaxTokens);
        finished.push_back(entry_of[e]);
        continue;
      }
      const TokenId token = r.sampler->sample(out.row(e));
      if (!r.has_first) r.has_first = true, r.first_token = Clock::now();
      if (req.options.stop_at_end_of_generation && engine.tokenizer().is_end_of_generation(token)) {
        finish(r, StopReason::EndOfGeneration);
        finished.push_back(entry_of[e]);
        continue;
      }
      r.sampler->accept(token);
      res.tokens.push_back(token);
      res.text += engine.tokenizer().token_to_piece(token);
      const int64_t length = int64_t(engine.sequence_tokens(r.seq).size());
      if (max_new >= 0 && int64_t(res.tokens.size()) >= max_new) {
        finish(r, StopReason::MaxTokens);
        finished.push_back(entry_of[e]);
      } else if (length >= ctx) {
        finish(r, StopReason::ContextFull);
        finished.push_back(entry_of[e]);
      } else {
        r.feed.assign(1, token);
      }
    }
    std::sort(finished.rbegin(), finished.rend());
    for (size_t k : finished) running.erase(running.begin() + ptrdiff_t(k));
  }
  return results;
}

}  // namespace greta::engine
