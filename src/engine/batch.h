// The batch runner: a list of generation requests through one engine with continuous batching
// (`greta-vk run --prompts-file`). It submits every request to a Scheduler (scheduler.h: admission by sequence slots
// and KV pages, prefix reuse, stop strings) and steps it until all are done. A request that can never run (empty
// prompt, longer than the context, larger than the KV budget) fails alone, with its error; the others run on.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"

namespace greta::engine {

struct BatchRequest {
  std::vector<TokenId> prompt;  // non-empty
  GenerateOptions options;      // max_tokens < 0: until end of generation or a full context
};

struct BatchResult {
  GenerateResult result;  // timings: prefill = admission to first token, decode = first token to the end
  int64_t reused_tokens = 0;  // prompt tokens whose KV pages another sequence already held
  std::string error;          // non-empty: the request could not run (result is empty)
};

struct BatchOptions {
  int64_t parallel = 4;  // sequences in flight at most (<= the engine's max_seqs is best: more split steps)
  // Called when a request finishes (index into the requests), in completion order.
  std::function<void(size_t, const BatchResult&)> on_done;
};

// Runs every request; results in request order. Throws greta::Error only for engine failures (a backend error).
std::vector<BatchResult> run_batch(Engine& engine, std::span<const BatchRequest> requests, const BatchOptions& options);

}  // namespace greta::engine
