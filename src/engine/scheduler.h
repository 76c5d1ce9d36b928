// The scheduler: generation requests in, tokens out, over one Engine with continuous batching. It is vLLM's split:
// the scheduler decides what runs in each step, the KV cache (kv_cache.h) owns the pages, the engine runs the model.
// Single-threaded: the caller (the batch runner, the server's engine thread) calls submit/cancel/step from one thread,
// and each request's sink is called on that thread, inside submit() or step().
//
// A step (step()):
//   1. admit waiting requests in arrival order while sequence slots (`parallel`) and KV pages allow: a request's
//      prompt plus max_tokens (capped by the context), for each of its n choices, is set aside at admission, so an
//      admitted request never runs out of pages mid-generation; a request that does not fit waits (and holds back the
//      ones behind it: first come, first served). One that can never fit fails alone.
//   2. one Engine::step: every running choice's next token (decode), then prompt chunks of requests still prefilling,
//      within max_batch tokens;
//   3. sample each choice that got logits, apply stop strings, end-of-generation, max_tokens and the context, and
//      send the events.
//
// Prefix reuse: a prompt whose leading pages a live sequence holds shares them (Engine::new_sequence_with_prefix).
// When a request ends, its prompt's full pages are kept (up to `retain_prompts` prompts, least recently used first
// out) so a later request with the same system prompt or conversation prefix reuses them; kept pages are given back
// as soon as an admission needs them. n > 1: after the prompt, choices 1..n-1 are forks of choice 0 (they share the
// prompt's full pages), each with its own sampler seeded seed + choice.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"

namespace greta::engine {

using RequestId = uint64_t;

inline constexpr int32_t kMaxTopLogprobs = 20;  // OpenAI's limit for top_logprobs

struct ScheduledRequest {
  std::vector<TokenId> prompt;  // non-empty
  GenerateOptions options;      // max_tokens < 0: until end of generation or a full context
  int32_t n = 1;                // choices (each is a sequence: n <= the scheduler's parallel)
  int32_t top_logprobs = -1;    // < 0: no log-probabilities; else the sampled token's and this many most likely
};

struct TokenLogprob {
  TokenId token;
  float logprob;  // natural log of the model's probability (softmax of the raw logits, before sampling filters)
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens whose KV pages were reused, not computed
  int64_t completion_tokens = 0;  // over all choices
  double queued_s = 0;            // submit to admission
  double prefill_s = 0;           // admission to the first token
  double decode_s = 0;            // first token to the end
};

// What a request produces, in order: Token events (per choice), one ChoiceDone per choice, then Finished; or Failed
// (the request could not run, or the engine failed) and nothing after it.
struct RequestEvent {
  enum class Kind { Token, ChoiceDone, Finished, Failed };
  Kind kind = Kind::Token;
  int32_t choice = 0;
  TokenId token = -1;             // Token
  std::string text;               // Token: the text it releases (stop strings held back; raw bytes, may end inside a
                                  // UTF-8 character); ChoiceDone: text still held when generation ended
  float logprob = 0;              // Token, when logprobs were asked for
  std::vector<TokenLogprob> top;  // Token: the most likely tokens at this position, most likely first
  StopReason stop = StopReason::MaxTokens;  // ChoiceDone
  std::string error;              // Failed
  RequestUsage usage;             // Finished
};
using RequestSink = std::function<void(const RequestEvent&)>;

struct SchedulerOptions {
  int64_t parallel = 4;        // sequences in flight at most (a request takes one per choice)
  int64_t retain_prompts = 8;  // finished prompts whose full pages are kept for reuse (0: none)
};

struct SchedulerStats {
  int64_t waiting = 0;            // requests submitted, not yet admitted
  int64_t running = 0;            // requests admitted, not finished
  int64_t running_sequences = 0;  // their choices' sequences
  int64_t kv_pages_running = 0;   // KV pages held by running sequences
  int64_t kv_pages_retained = 0;  // pages held only for prefix reuse (given back on demand)
  int64_t kv_pages_total = 0;     // the budget
  double kv_usage() const { return kv_pages_total > 0 ? double(kv_pages_running) / double(kv_pages_total) : 0; }
};

class Scheduler {
public:
  Scheduler(Engine& engine, const SchedulerOptions& options);
  ~Scheduler();  // releases every sequence it holds
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Problems with it (empty prompt, longer than the context, more choices than `parallel`, more
  // pages than the budget) are reported through its sink as Failed on the next step().
  RequestId submit(ScheduledRequest request, RequestSink sink);
  // Drops a request: its sequences are released now; its sink is not called again. Unknown ids are ignored.
  void cancel(RequestId id);
  // Nothing waiting or running.
  bool idle() const { return waiting_.empty() && running_.empty(); }
  // One iteration (see the top). Throws greta::Error when the engine fails; the requests stay as they were, and the
  // caller decides (fail_all, or retry).
  void step();
  // Every request gets Failed with `why` and is dropped.
  void fail_all(const std::string& why);
  SchedulerStats stats() const;

private:
  using Clock = std::chrono::steady_clock;
  struct Choice {
    SeqId seq = -1;
    Sampler sampler;
    StopMatcher stops;
    std::vector<TokenId> feed;  // what the next step appends (a prompt chunk, the last sampled token, or nothing
                                // for a fork's first step)
    int64_t generated = 0;
    bool done = false;
    bool ready = false;  // in the next step (a sampled token to append, or a fork's first step)
  };
  struct Request {
    RequestId id = 0;
    ScheduledRequest spec;
    RequestSink sink;
    std::vector<Choice> choices;  // choice 0 exists from admission, the rest after the prompt
    size_t prompt_done = 0;       // prompt tokens handed to the engine
    int64_t reserve = 0;          // positions per choice set aside at admission
    RequestUsage usage;
    Clock::time_point submitted, admitted, first_token;
    bool has_first = false;
  };
  struct Retained {
    SeqId seq;
    uint64_t last_use;
  };

  bool try_admit(Request& r);                 // false: not enough pages now
  int64_t pages_still_needed() const;         // pages running requests may still take
  void fork_choices(Request& r);              // after the prompt: choices 1..n-1
  // A choice's next token from its logits (with its log-probabilities when asked): draws run in parallel over the
  // step's choices (each has its own sampler); then, in entry order, accept() records the token and sends the events.
  struct Draw {
    TokenId token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> top;
  };
  Draw draw(Request& r, int32_t choice, std::span<const float> logits);
  void accept(Request& r, int32_t choice, Draw&& drawn);
  void end_choice(Request& r, int32_t choice, StopReason why);
  void finish(Request& r);                    // Finished event; sequences released or retained
  void retain(SeqId seq, int64_t prompt_tokens);
  bool evict_one();                           // releases the least recently used retained prompt

  Engine& engine_;
  SchedulerOptions options_;
  RequestId next_id_ = 1;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  std::list<Retained> retained_;
  uint64_t clock_ = 0;
  // Reused by every step.
  struct EntryRef {
    Request* request;
    int32_t choice;
  };
  std::vector<StepEntry> entries_;
  std::vector<EntryRef> refs_;
  std::vector<size_t> sampled_;  // entries whose choice samples this step
  std::vector<Draw> draws_;
  ThreadPool pool_;              // the draws of a step's choices (a 128k-vocabulary draw is ~0.3 ms of host time)
};

// Why `request` can never run on `engine` with `parallel` sequence slots ("" when it can): an empty prompt, one longer
// than the context, more choices than slots, too many top_logprobs, a token outside the vocabulary, more KV pages
// than the budget (the prompt plus max_tokens per choice, forks sharing the prompt's full pages). Reads only what is
// fixed once the engine is loaded, so the server's HTTP threads call it too (a 400 before anything is queued).
std::string request_rejection(const Engine& engine, int64_t parallel, const ScheduledRequest& request);

// Log-probabilities of one row of logits: the token's, and the k most likely (most likely first, lower id on ties).
float token_logprob(std::span<const float> logits, TokenId token, int32_t k, std::vector<TokenLogprob>& top);

}  // namespace greta::engine
