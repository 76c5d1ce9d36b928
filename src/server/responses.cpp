#include "server/responses.h"

namespace greta::server {

using engine::RequestEvent;

CompletionResponse::CompletionResponse(const CompletionRequest& request, std::string id, std::string model,
                                       int64_t created, const model::Tokenizer& tokenizer)
    : chat_(request.endpoint == Endpoint::ChatCompletions),
      stream_(request.stream),
      include_usage_(request.stream && request.include_usage),
      logprobs_(request.top_logprobs >= 0),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      tokenizer_(tokenizer),
      choices_(size_t(request.n)) {
  if (chat_)
    for (Choice& c : choices_)
      if (model::HarmonyReply h(tokenizer); h.active()) c.harmony = h;
}

json CompletionResponse::chunk(json choices) const {
  json out = {{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"system_fingerprint", "greta-" GRETA_VERSION},
              {"choices", std::move(choices)}};
  if (include_usage_) out["usage"] = nullptr;
  return out;
}

json CompletionResponse::choice_delta(int32_t index, const std::string& text, const json* logprobs,
                                      const char* finish, const std::string& reasoning) const {
  json c = {{"index", index}, {"logprobs", logprobs ? *logprobs : json(nullptr)},
            {"finish_reason", finish ? json(finish) : json(nullptr)}};
  if (chat_) {
    c["delta"] = json::object();
    if (!text.empty()) c["delta"]["content"] = text;
    if (!reasoning.empty()) c["delta"]["reasoning_content"] = reasoning;
  } else {
    c["text"] = text;
  }
  return c;
}

std::vector<std::string> CompletionResponse::opening_chunks() const {
  std::vector<std::string> out;
  if (!chat_) return out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    json c = choice_delta(int32_t(i), "", nullptr, nullptr);
    c["delta"] = {{"role", "assistant"}, {"content", ""}};
    out.push_back(dump(chunk(json::array({std::move(c)}))));
  }
  return out;
}

TokenLogprobs CompletionResponse::logprobs_of(const RequestEvent& ev) const {
  TokenLogprobs t;
  t.piece = tokenizer_.token_to_piece(ev.token);
  t.logprob = ev.logprob;
  for (const auto& alt : ev.top) t.top.emplace_back(tokenizer_.token_to_piece(alt.token), alt.logprob);
  return t;
}

void CompletionResponse::on_event(const RequestEvent& ev, std::vector<std::string>& chunks) {
  switch (ev.kind) {
    case RequestEvent::Kind::Token: {
      Choice& c = choices_[size_t(ev.choice)];
      const model::HarmonyReply::Part part =
          c.harmony ? c.harmony->feed(ev.token, ev.text) : model::HarmonyReply::Part::Answer;
      const std::string text = part == model::HarmonyReply::Part::Answer ? c.utf8.push(ev.text) : std::string();
      const std::string reasoning =
          part == model::HarmonyReply::Part::Reasoning ? c.reasoning_utf8.push(ev.text) : std::string();
      c.text += text;
      c.reasoning += reasoning;
      json logprobs;
      if (logprobs_) {
        const TokenLogprobs t = logprobs_of(ev);
        if (chat_) {
          logprobs = {{"content", json::array({chat_logprob_entry(t)})}};
          c.logprobs.push_back(logprobs["content"][0]);
        } else {
          json top = json::object();
          for (const auto& [piece, lp] : t.top) top[piece] = lp;
          logprobs = {{"tokens", {t.piece}}, {"token_logprobs", {t.logprob}}, {"top_logprobs", {top}},
                      {"text_offset", {c.text.size() - text.size()}}};
          c.tokens.push_back(t.piece), c.token_logprobs.push_back(t.logprob), c.top_logprobs.push_back(top);
          c.offsets.push_back(c.text.size() - text.size());
        }
      }
      if (stream_ && (!text.empty() || !reasoning.empty() || logprobs_))
        chunks.push_back(dump(chunk(
            json::array({choice_delta(ev.choice, text, logprobs_ ? &logprobs : nullptr, nullptr, reasoning)}))));
      break;
    }
    case RequestEvent::Kind::ChoiceDone: {
      Choice& c = choices_[size_t(ev.choice)];
      const std::string text = c.utf8.push(ev.text) + c.utf8.finish();
      c.text += text;
      c.reasoning += c.reasoning_utf8.finish();
      c.finish_reason = server::finish_reason(ev.stop);
      if (stream_) {
        if (!text.empty()) chunks.push_back(dump(chunk(json::array({choice_delta(ev.choice, text, nullptr, nullptr)}))));
        chunks.push_back(dump(chunk(json::array({choice_delta(ev.choice, "", nullptr, c.finish_reason.c_str())}))));
      }
      break;
    }
    case RequestEvent::Kind::Finished:
      usage_ = ev.usage;
      finished_ = true;
      if (include_usage_) {
        json last = chunk(json::array());
        last["usage"] = usage_json();
        chunks.push_back(dump(last));
      }
      break;
    case RequestEvent::Kind::Failed:
      error_ = ev.error.empty() ? "the request failed" : ev.error;
      if (stream_) chunks.push_back(dump(ApiError{500, error_, "", ""}.to_json()));
      break;
  }
}

json CompletionResponse::usage_json() const {
  return {{"prompt_tokens", usage_.prompt_tokens},
          {"completion_tokens", usage_.completion_tokens},
          {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage_.cached_tokens}}}};
}

json CompletionResponse::final_json() const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json out = {{"index", i}, {"finish_reason", c.finish_reason}};
    if (chat_) {
      out["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) out["message"]["reasoning_content"] = c.reasoning;
      out["logprobs"] = logprobs_ ? json{{"content", c.logprobs}} : json(nullptr);
    } else {
      out["text"] = c.text;
      out["logprobs"] = logprobs_ ? json{{"tokens", c.tokens}, {"token_logprobs", c.token_logprobs},
                                         {"top_logprobs", c.top_logprobs}, {"text_offset", c.offsets}}
                                  : json(nullptr);
    }
    choices.push_back(std::move(out));
  }
  return {{"id", id_},
          {"object", chat_ ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"system_fingerprint", "greta-" GRETA_VERSION},
          {"choices", std::move(choices)},
          {"usage", usage_json()}};
}

}  // namespace greta::server
