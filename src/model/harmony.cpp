#include "model/harmony.h"

namespace greta::model {

namespace {

TokenId find_control(const Tokenizer& tokenizer, std::string_view text) {
  const auto ids = tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/true);
  return ids.size() == 1 && tokenizer.token_text(ids[0]) == text ? ids[0] : -1;
}

}  // namespace

HarmonyReply::HarmonyReply(const Tokenizer& tokenizer)
    : channel_(find_control(tokenizer, "<|channel|>")),
      message_(find_control(tokenizer, "<|message|>")),
      start_(find_control(tokenizer, "<|start|>")),
      end_(find_control(tokenizer, "<|end|>")) {}

HarmonyReply::Part HarmonyReply::feed(TokenId token, std::string_view piece) {
  if (!active()) return Part::Answer;
  if (token == channel_) {  // a channel name follows, up to <|message|>
    state_ = State::Channel;
    channel_name_.clear();
    return Part::Markup;
  }
  if (token == message_) {  // the body: the final channel is the answer, any other the reasoning
    state_ = State::Body;
    answer_ = channel_name_.find("final") != std::string::npos;
    return Part::Markup;
  }
  if (token == start_) {  // a new message's role, then its channel
    state_ = State::Role;
    return Part::Markup;
  }
  if (token == end_) {
    state_ = State::Start;
    return Part::Markup;
  }
  switch (state_) {
    case State::Channel: channel_name_ += piece; return Part::Markup;
    case State::Role: return Part::Markup;
    case State::Body: return answer_ ? Part::Answer : Part::Reasoning;
    case State::Start: return Part::Answer;  // text with no channel header: an answer as it is
  }
  return Part::Answer;
}

}  // namespace greta::model
