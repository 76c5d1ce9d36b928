// gpt-oss writes its replies in OpenAI's harmony format: messages on named channels,
//   <|channel|>analysis<|message|>THE REASONING<|end|><|start|>assistant<|channel|>final<|message|>THE ANSWER<|return|>
// HarmonyReply follows a reply token by token and says where each token's text belongs: the reasoning (the
// analysis and commentary channels), the answer (the final channel, or a reply that opens with no channel), or
// nowhere (the markup, the role and channel names). `chat` prints the answer; the server returns the answer as the
// message content and the reasoning as reasoning_content.
#pragma once
#include <string>

#include "model/tokenizer.h"

namespace greta::model {

class HarmonyReply {
public:
  // Finds the markup tokens in the vocabulary; active() is false for a vocabulary without them (any other model).
  explicit HarmonyReply(const Tokenizer& tokenizer);
  bool active() const { return channel_ >= 0 && message_ >= 0; }

  enum class Part { Markup, Reasoning, Answer };
  // Where this token's text goes. Call for every generated token in order.
  Part feed(TokenId token, std::string_view piece);

private:
  enum class State { Start, Role, Channel, Body };
  TokenId channel_ = -1, message_ = -1, start_ = -1, end_ = -1;
  State state_ = State::Start;
  std::string channel_name_;
  bool answer_ = false;  // the current body is the final channel's
};

}  // namespace greta::model
