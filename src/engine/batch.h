// The batch runner: many generation requests through one engine with continuous batching, the engine's first
// multi-sequence caller (`greta-vk run --prompts-file`; the server's scheduler follows the same contract).
//
// Each iteration is one Engine::step: every running sequence's next token (decode) plus prompt chunks of sequences
// still prefilling, within max_batch tokens. A request is admitted when a sequence slot is free (at most `parallel`
// run) and the KV budget can hold its prompt plus its max_tokens (capped by the context): admitted requests never
// run out of pages mid-generation, and a request that cannot fit waits until finishing ones free theirs. A prompt
// whose prefix a running sequence holds shares those pages (Engine::new_sequence_with_prefix). A request larger
// than the whole budget (or context) fails alone, with its error; the others run on.
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
