// A completion's response, built from the scheduler's events: OpenAI's chat.completion / text_completion objects, or
// their streaming chunks (chat.completion.chunk; text_completion for /v1/completions). Generated text reaches the
// client as whole UTF-8 characters only (a token that ends inside a character waits for the next one).
//
// Streaming, per request: one chunk per choice announcing the assistant role (chat), a chunk per token that releases
// text (or carries logprobs), a chunk with each choice's finish_reason, with stream_options.include_usage a last
// chunk with no choices and the usage, then "[DONE]" (the HTTP layer writes that line).
//
// gpt-oss's replies (harmony, model/harmony.h) on chat completions: the final channel is the message content, the
// analysis channels its reasoning_content (the field llama.cpp's and vLLM's servers use), the markup neither.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/utf8_stream.h"
#include "engine/scheduler.h"
#include "model/harmony.h"
#include "model/tokenizer.h"
#include "server/api.h"

namespace greta::server {

class CompletionResponse {
public:
  CompletionResponse(const CompletionRequest& request, std::string id, std::string model, int64_t created,
                     const model::Tokenizer& tokenizer);

  // Streaming: the chunks (JSON texts) to send before any event.
  std::vector<std::string> opening_chunks() const;
  // Takes one event; appends the chunks it produces when streaming (nothing otherwise).
  void on_event(const engine::RequestEvent& event, std::vector<std::string>& chunks);
  // Non-streaming: the whole response, once Finished has been seen.
  json final_json() const;

  bool finished() const { return finished_; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  const engine::RequestUsage& usage() const { return usage_; }
  // The first choice's finish reason ("stop" / "length"; "" before it ends).
  const std::string& finish_reason() const { return choices_[0].finish_reason; }

private:
  struct Choice {
    Utf8Stream utf8, reasoning_utf8;
    std::string text;
    std::string reasoning;  // gpt-oss (harmony): the analysis channels, returned as reasoning_content
    std::optional<model::HarmonyReply> harmony;
    std::string finish_reason;
    json logprobs = json::array();      // chat: entries; completions: unused
    json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  };
  json chunk(json choices) const;              // a streaming chunk around `choices`
  json choice_delta(int32_t index, const std::string& text, const json* logprobs, const char* finish,
                    const std::string& reasoning = {}) const;
  json usage_json() const;
  TokenLogprobs logprobs_of(const engine::RequestEvent& event) const;

  const bool chat_, stream_, include_usage_, logprobs_;
  const std::string id_, model_;
  const int64_t created_;
  const model::Tokenizer& tokenizer_;
  std::vector<Choice> choices_;
  engine::RequestUsage usage_;
  bool finished_ = false;
  std::string error_;
};

}  // namespace greta::server
