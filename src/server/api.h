// OpenAI's API as the server speaks it: request bodies parsed and checked into typed requests, and the response
// objects built from what the engine produced. No I/O here (the HTTP side is server.cpp): this is the part the fuzz
// target (tests/fuzz/api_request_fuzz.cpp) drives with arbitrary bytes.
//
// Checking: a body that is not a JSON object, a field of the wrong type, a value out of range, an empty or malformed
// message list → ApiError 400 naming the field (OpenAI's error object: message, type, param, code). Unknown fields
// are ignored, as OpenAI's API does; null is the same as absent for optional fields.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/chat_template.h"

namespace greta::server {

using nlohmann::json;
using engine::TokenId;

// An error as OpenAI's API reports it: HTTP status + {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field ("" when none)
  std::string code;   // e.g. "model_not_found" ("" → null)
  std::string type() const;  // "invalid_request_error", "authentication_error", "server_error", ...
  json to_json() const;
};

enum class Endpoint { ChatCompletions, Completions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;                         // "" when absent
  std::vector<model::ChatMessage> messages;  // chat: roles system / user / assistant ("developer" → system)
  std::string prompt;                        // completions: the prompt text...
  std::vector<TokenId> prompt_tokens;        // ...or its token ids (prompt given as an array of integers)
  std::optional<int64_t> max_tokens;         // max_tokens / max_completion_tokens (>= 1); absent: to the context
  engine::SamplerParams sampling;            // the server's defaults, overridden by the request's fields
  bool seed_given = false;                   // false: the server picks a random seed
  std::vector<std::string> stop;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;                // stream_options.include_usage
  int32_t top_logprobs = -1;                 // < 0: no logprobs; else how many alternatives per token
  std::string user;
};

// Limits a request is checked against (the server's options).
struct RequestLimits {
  int32_t max_n = 16;               // choices per request
  int32_t max_stop = 16;            // stop strings
  size_t max_stop_bytes = 256;      // per stop string
  size_t max_messages = 4096;
  int max_json_depth = 64;          // nesting of arrays/objects in the body (deeper: 400, before parsing)
};

// Parses a /v1/chat/completions or /v1/completions body. `defaults` are the server's sampling defaults. Throws
// ApiError.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body,
                                           const engine::SamplerParams& defaults, const RequestLimits& limits);

// /tokenize {"content": string, "add_special": bool (default true), "parse_special": bool (default false),
// "with_pieces": bool} and /detokenize {"tokens": [ids]}: llama-server's shapes.
struct TokenizeRequest {
  std::string content;
  bool add_special = true, parse_special = false, with_pieces = false;
};
TokenizeRequest parse_tokenize_request(std::string_view body, const RequestLimits& limits);
std::vector<TokenId> parse_detokenize_request(std::string_view body, int64_t vocab_size, const RequestLimits& limits);

// The body as JSON, or ApiError 400 (not JSON, too deep, not an object).
json parse_body(std::string_view body, const RequestLimits& limits);

// "stop" or "length" for an engine stop reason.
const char* finish_reason(engine::StopReason reason);

// The logprobs of one generated token, as the response objects carry them.
struct TokenLogprobs {
  std::string piece;  // the token's text (raw bytes)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // piece, logprob; most likely first
};

// Chat logprobs entry: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}.
json chat_logprob_entry(const TokenLogprobs& t);

// JSON text of a value; invalid UTF-8 in strings (a token piece ending mid-character) becomes U+FFFD.
std::string dump(const json& value);

}  // namespace greta::server
