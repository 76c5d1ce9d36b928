// A conversation with a model through its chat template, keeping the KV cache across turns: each turn prefills only
// what is new (the closing of the previous reply, the user's message, the assistant header) and generates the reply.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "model/chat_template.h"
#include "engine/engine.h"
#include "engine/sampler.h"

namespace greta::cli {
using model::ChatTemplate;
using model::ChatMessage;
using model::ChatSegment;
using model::ChatFamily;


struct ChatTurn {
  int64_t new_tokens = 0;        // tokens prefilled for this turn
  engine::GenerateResult reply;  // the reply's tokens and text (without the end-of-turn token)
  bool context_full = false;     // the context has no room left: the message was not added, or the reply was cut
};

class ChatSession {
public:
  // The engine must be empty (n_past() == 0); the session appends to it. `system` may be empty.
  ChatSession(engine::Engine& engine, ChatTemplate tmpl, const engine::SamplerParams& sampling, std::string system);

  // Adds the user's message and generates the reply (at most max_reply_tokens; < 0: until the end of the turn or a
  // full context), calling on_token for each reply token. A message that does not fit in the context (with room for
  // a reply) is not added: context_full is set and nothing changes.
  ChatTurn send(std::string_view user, int64_t max_reply_tokens, const engine::TokenCallback& on_token = {});
  // Stop strings for every reply (--stop): a reply ends where one appears, without it.
  void set_stop(std::vector<std::string> stop) { stop_ = std::move(stop); }

  const ChatTemplate& chat_template() const { return tmpl_; }
  int64_t turns() const { return turns_; }

private:
  bool is_end_of_turn(engine::TokenId token) const;

  engine::Engine& engine_;
  ChatTemplate tmpl_;
  engine::Sampler sampler_;
  std::string system_;
  std::vector<std::string> stop_;
  int64_t turns_ = 0;
  engine::TokenId end_of_turn_ = -1;  // the family's end-of-turn special token in this vocabulary, -1 if none
};

}  // namespace greta::cli
