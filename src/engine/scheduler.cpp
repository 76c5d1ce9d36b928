#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <thread>

#include "core/error.h"

namespace greta::engine {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

float token_logprob(std::span<const float> logits, TokenId token, int32_t k, std::vector<TokenLogprob>& top) {
  double max = -INFINITY;
  for (float v : logits) max = std::max(max, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max);
  const double log_z = max + std::log(sum);
  top.clear();
  if (k > 0) {
    // A min-heap of the k best (ordered so that the worst — lowest logit, then highest id — is on top).
    const auto better = [&](TokenId a, TokenId b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    };
    std::priority_queue<TokenId, std::vector<TokenId>, decltype(better)> heap(better);
    for (TokenId i = 0; i < TokenId(logits.size()); ++i) {
      if (int32_t(heap.size()) < k) heap.push(i);
      else if (better(i, heap.top())) heap.pop(), heap.push(i);
    }
    top.resize(heap.size());
    for (size_t j = heap.size(); j-- > 0; heap.pop()) top[j] = {heap.top(), float(double(logits[size_t(heap.top())]) - log_z)};
  }
  return float(double(logits[size_t(token)]) - log_z);
}

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options)
    : engine_(engine), options_(options), pool_(std::clamp(int(std::thread::hardware_concurrency()), 1, 8)) {
  if (options_.parallel < 1) fail("parallel sequences ", options_.parallel, ": must be at least 1");
  if (options_.retain_prompts < 0) fail("retained prompts ", options_.retain_prompts, ": must not be negative");
}

Scheduler::~Scheduler() {
  for (auto& r : running_)
    for (Choice& c : r->choices) engine_.release_sequence(c.seq);
  for (const Retained& k : retained_) engine_.release_sequence(k.seq);
}

RequestId Scheduler::submit(ScheduledRequest request, RequestSink sink) {
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->spec = std::move(request);
  r->sink = std::move(sink);
  r->submitted = Clock::now();
  waiting_.push_back(std::move(r));
  return waiting_.back()->id;
}

void Scheduler::cancel(RequestId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      waiting_.erase(it);
      return;
    }
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) {
      for (Choice& c : (*it)->choices) engine_.release_sequence(c.seq);
      running_.erase(it);
      return;
    }
}

void Scheduler::fail_all(const std::string& why) {
  RequestEvent failed;
  failed.kind = RequestEvent::Kind::Failed;
  failed.error = why;
  for (auto& r : running_) {
    for (Choice& c : r->choices) engine_.release_sequence(c.seq);
    r->sink(failed);
  }
  running_.clear();
  for (auto& r : waiting_) r->sink(failed);
  waiting_.clear();
}

namespace {

// Positions set aside per choice (prompt + max_tokens, capped by the context) and the pages a request takes at most.
int64_t reserved_positions(const ScheduledRequest& s, int64_t ctx) {
  const int64_t n_prompt = int64_t(s.prompt.size());
  return s.options.max_tokens < 0 ? ctx : std::min(ctx, n_prompt + s.options.max_tokens);
}
int64_t pages_at_most(const KvCache& kv, const ScheduledRequest& s, int64_t ctx) {
  const int64_t per_choice = kv.pages_for(reserved_positions(s, ctx));
  return per_choice + (s.n - 1) * (per_choice - int64_t(s.prompt.size()) / kv.page_size());
}

}  // namespace

std::string request_rejection(const Engine& engine, int64_t parallel, const ScheduledRequest& s) {
  const int64_t n_prompt = int64_t(s.prompt.size()), ctx = engine.context_size();
  if (n_prompt == 0) return "the prompt is empty";
  if (s.n < 1 || s.n > parallel) return cat("n = ", s.n, ": must be 1..", parallel, " (--parallel)");
  if (s.top_logprobs > kMaxTopLogprobs) return cat("top_logprobs ", s.top_logprobs, ": at most ", kMaxTopLogprobs);
  if (n_prompt > ctx) return cat("the prompt has ", n_prompt, " tokens; the context holds ", ctx);
  for (TokenId t : s.prompt)
    if (t < 0 || t >= engine.vocab_size()) return cat("token id ", t, " is outside the vocabulary");
  const KvCache& kv = engine.kv_cache();
  const int64_t pages = pages_at_most(kv, s, ctx), budget = kv.max_pages() - 1;
  if (pages > budget)
    return cat("the request needs ", pages * kv.page_size(), " positions of KV cache; the budget holds ",
               budget * kv.page_size());
  return "";
}

int64_t Scheduler::pages_still_needed() const {
  const KvCache& kv = engine_.kv_cache();
  int64_t pages = 0;
  for (const auto& r : running_) {
    const int64_t per_choice = kv.pages_for(r->reserve);
    for (const Choice& c : r->choices) pages += per_choice - int64_t(kv.pages(c.seq).size());
    const int64_t shared = int64_t(r->spec.prompt.size()) / kv.page_size();
    pages += (r->spec.n - int64_t(r->choices.size())) * (per_choice - shared);  // forks still to come
  }
  return pages;
}

bool Scheduler::try_admit(Request& r) {
  const KvCache& kv = engine_.kv_cache();
  const int64_t n_prompt = int64_t(r.spec.prompt.size()), reserve = reserved_positions(r.spec, engine_.context_size());
  // The sequence first: pages it shares with a live (or retained) sequence are not needed again, and taking them
  // before any eviction keeps them.
  const auto [seq, reused] = engine_.new_sequence_with_prefix(r.spec.prompt);
  const int64_t need = pages_at_most(kv, r.spec, engine_.context_size()) - int64_t(kv.pages(seq).size());
  const auto room = [&] { return kv.available_pages() - pages_still_needed(); };
  while (need > room() && evict_one()) {
  }
  if (need > room()) {
    engine_.release_sequence(seq);
    return false;
  }
  SamplerParams sampling = r.spec.options.sampling;
  Choice first{seq, Sampler(sampling), StopMatcher(r.spec.options.stop), {}, 0, false, false};
  for (TokenId t : r.spec.prompt) first.sampler.accept(t);
  r.choices.push_back(std::move(first));
  r.prompt_done = size_t(reused);
  r.reserve = reserve;
  r.usage.prompt_tokens = n_prompt;
  r.usage.cached_tokens = reused;
  r.admitted = Clock::now();
  r.usage.queued_s = seconds_between(r.submitted, r.admitted);
  return true;
}

void Scheduler::fork_choices(Request& r) {
  for (int32_t i = 1; i < r.spec.n; ++i) {
    SamplerParams sampling = r.spec.options.sampling;
    sampling.seed += uint64_t(i);
    Choice c{engine_.fork_sequence(r.choices[0].seq), Sampler(sampling), StopMatcher(r.spec.options.stop), {}, 0,
             false, true};
    for (TokenId t : r.spec.prompt) c.sampler.accept(t);
    r.choices.push_back(std::move(c));
  }
}

Scheduler::Draw Scheduler::draw(Request& r, int32_t choice, std::span<const float> logits) {
  Choice& c = r.choices[size_t(choice)];
  Draw d;
  if (r.spec.options.max_tokens >= 0 && c.generated >= r.spec.options.max_tokens) return d;  // ends without a draw
  d.token = c.sampler.sample(logits);
  if (r.spec.top_logprobs >= 0) d.logprob = token_logprob(logits, d.token, r.spec.top_logprobs, d.top);
  return d;
}

void Scheduler::accept(Request& r, int32_t choice, Draw&& drawn) {
  Choice& c = r.choices[size_t(choice)];
  const GenerateOptions& opt = r.spec.options;
  if (drawn.token < 0) return end_choice(r, choice, StopReason::MaxTokens);
  if (!r.has_first) r.has_first = true, r.first_token = Clock::now();
  if (opt.stop_at_end_of_generation && engine_.tokenizer().is_end_of_generation(drawn.token))
    return end_choice(r, choice, StopReason::EndOfGeneration);
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::Token;
  ev.choice = choice;
  ev.token = drawn.token;
  ev.logprob = drawn.logprob;
  ev.top = std::move(drawn.top);
  c.sampler.accept(ev.token);
  ++c.generated;
  ++r.usage.completion_tokens;
  ev.text = c.stops.push(engine_.tokenizer().token_to_piece(ev.token));
  r.sink(ev);
  if (c.stops.matched()) return end_choice(r, choice, StopReason::StopString);
  if (opt.max_tokens >= 0 && c.generated >= opt.max_tokens) return end_choice(r, choice, StopReason::MaxTokens);
  if (int64_t(engine_.sequence_tokens(c.seq).size()) >= engine_.context_size())
    return end_choice(r, choice, StopReason::ContextFull);
  c.feed.assign(1, ev.token);
  c.ready = true;
}

void Scheduler::end_choice(Request& r, int32_t choice, StopReason why) {
  Choice& c = r.choices[size_t(choice)];
  c.done = true;
  c.ready = false;
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::ChoiceDone;
  ev.choice = choice;
  ev.stop = why;
  if (why != StopReason::StopString) ev.text = c.stops.flush();
  r.sink(ev);
}

void Scheduler::finish(Request& r) {
  const auto now = Clock::now();
  r.usage.prefill_s = seconds_between(r.admitted, r.has_first ? r.first_token : now);
  r.usage.decode_s = r.has_first ? seconds_between(r.first_token, now) : 0;
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::Finished;
  ev.usage = r.usage;
  for (size_t i = 0; i < r.choices.size(); ++i) {
    if (i == 0) retain(r.choices[i].seq, int64_t(r.spec.prompt.size()));
    else engine_.release_sequence(r.choices[i].seq);
  }
  r.choices.clear();
  r.sink(ev);
}

void Scheduler::retain(SeqId seq, int64_t prompt_tokens) {
  const int64_t keep = prompt_tokens / engine_.kv_cache().page_size() * engine_.kv_cache().page_size();
  if (options_.retain_prompts == 0 || keep == 0) return engine_.release_sequence(seq);
  engine_.truncate_sequence(seq, keep);
  retained_.push_back({seq, ++clock_});
  while (int64_t(retained_.size()) > options_.retain_prompts) evict_one();
}

bool Scheduler::evict_one() {
  if (retained_.empty()) return false;
  engine_.release_sequence(retained_.front().seq);
  retained_.pop_front();
  return true;
}

void Scheduler::step() {
  // 1. Admission, first come first served.
  int64_t slots = 0;
  for (const auto& r : running_) slots += r->spec.n;
  while (!waiting_.empty()) {
    Request& r = *waiting_.front();
    if (const std::string why = request_rejection(engine_, options_.parallel, r.spec); !why.empty()) {
      RequestEvent ev;
      ev.kind = RequestEvent::Kind::Failed;
      ev.error = why;
      const auto owned = std::move(waiting_.front());
      waiting_.pop_front();
      owned->sink(ev);
      continue;
    }
    if (slots + r.spec.n > options_.parallel || !try_admit(r)) break;
    slots += r.spec.n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (running_.empty()) return;

  // 2. One engine step: decode tokens first, then prompt chunks within max_batch tokens.
  entries_.clear();
  refs_.clear();
  int64_t tokens = 0;
  for (auto& r : running_)
    for (size_t i = 0; i < r->choices.size(); ++i) {
      Choice& c = r->choices[i];
      if (!c.ready) continue;
      entries_.push_back({c.seq, c.feed, LogitsWanted::Last});
      refs_.push_back({r.get(), int32_t(i)});
      tokens += std::max<int64_t>(1, int64_t(c.feed.size()));
    }
  const int64_t max_tokens = engine_.options().max_batch;
  for (auto& r : running_) {
    const auto& prompt = r->spec.prompt;
    if (tokens >= max_tokens) break;
    if (r->prompt_done >= prompt.size()) continue;
    Choice& c = r->choices[0];
    const size_t take = size_t(std::min<int64_t>(int64_t(prompt.size() - r->prompt_done), max_tokens - tokens));
    c.feed.assign(prompt.begin() + ptrdiff_t(r->prompt_done), prompt.begin() + ptrdiff_t(r->prompt_done + take));
    r->prompt_done += take;
    const bool last = r->prompt_done == prompt.size();
    entries_.push_back({c.seq, c.feed, last ? LogitsWanted::Last : LogitsWanted::None});
    refs_.push_back({r.get(), 0});
    tokens += int64_t(take);
  }
  if (entries_.empty()) return;
  const StepLogits& out = engine_.step(entries_);

  // 3. Sample where logits came back (the draws in parallel), then record them and end what stops, in entry order.
  sampled_.clear();
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (entries_[e].logits == LogitsWanted::None) continue;
    Request& r = *refs_[e].request;
    Choice& c = r.choices[size_t(refs_[e].choice)];
    c.ready = false;
    c.feed.clear();
    if (refs_[e].choice == 0 && int64_t(r.choices.size()) < r.spec.n) fork_choices(r);
    sampled_.push_back(e);
  }
  draws_.assign(sampled_.size(), Draw{});
  pool_.parallel_for(int64_t(sampled_.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const size_t e = sampled_[size_t(i)];
      draws_[size_t(i)] = draw(*refs_[e].request, refs_[e].choice, out.row(e));
    }
  });
  for (size_t i = 0; i < sampled_.size(); ++i)
    accept(*refs_[sampled_[i]].request, refs_[sampled_[i]].choice, std::move(draws_[i]));
  for (size_t i = 0; i < running_.size();) {
    Request& r = *running_[i];
    const bool all_done = int64_t(r.choices.size()) == r.spec.n &&
                          std::all_of(r.choices.begin(), r.choices.end(), [](const Choice& c) { return c.done; });
    if (!all_done) {
      ++i;
      continue;
    }
    const auto owned = std::move(running_[i]);
    running_.erase(running_.begin() + ptrdiff_t(i));
    finish(*owned);
  }
}

SchedulerStats Scheduler::stats() const {
  const KvCache& kv = engine_.kv_cache();
  SchedulerStats s;
  s.waiting = int64_t(waiting_.size());
  s.running = int64_t(running_.size());
  std::vector<uint8_t> seen(size_t(kv.capacity()), 0);
  for (const auto& r : running_)
    for (const Choice& c : r->choices) {
      ++s.running_sequences;
      for (int32_t p : kv.pages(c.seq))
        if (!seen[size_t(p)]) seen[size_t(p)] = 1, ++s.kv_pages_running;
    }
  s.kv_pages_retained = kv.used_pages() - s.kv_pages_running;
  s.kv_pages_total = kv.max_pages() - 1;
  return s;
}

}  // namespace greta::engine
