// A conversation with a model through its chat template, keeping the KV cache across turns: each turn prefills only
// what is new (the closing of the previous reply, the user's message, the assistant header) and generates the reply.
//
// The session also keeps the conversation itself (the system message and every exchange, replies as generated), so
// that it can be cleared, saved and loaded, given a new system message, or shortened when it outgrows the context:
// with a context shift, the oldest exchanges are dropped and the system message and the most recent exchanges are
// prefilled again.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/chat_template.h"

namespace greta::cli {
using model::ChatFamily;
using model::ChatMessage;
using model::ChatSegment;
using model::ChatTemplate;

// One exchange: the user's message and the reply as the model wrote it (its text, and its tokens, which the context
// holds rather than a re-tokenization of the text).
struct ChatExchange {
  std::string user;
  std::string reply;
  std::vector<engine::TokenId> reply_tokens;
};

struct ChatTurn {
  // The message does not fit in the context (with room for a reply): it was not added and nothing changed.
  bool rejected = false;
  bool fits_alone = true;         // a rejected message would fit in an empty context (after /clear)
  int64_t message_tokens = 0;     // the tokens the message's turn needs (also when rejected)
  int64_t new_tokens = 0;         // tokens prefilled for this turn (with the history again after a shift)
  int64_t dropped_exchanges = 0;  // the oldest exchanges a context shift dropped before this message
  engine::GenerateResult reply;   // the reply's tokens and text (without the end-of-turn token)
  bool context_full = false;      // the reply was cut at the end of the context
};

class ChatSession {
public:
  // The engine must be empty (n_past() == 0); the session appends to it. `system` may be empty.
  ChatSession(engine::Engine& engine, ChatTemplate tmpl, const engine::SamplerParams& sampling, std::string system);

  // Adds the user's message and generates the reply (at most max_reply_tokens; < 0: until the end of the turn or a
  // full context), calling on_token for each reply token (false stops the reply; what it has so far is kept). A
  // message that does not fit is rejected, unless a context shift makes room for it.
  ChatTurn send(std::string_view user, int64_t max_reply_tokens, const engine::TokenCallback& on_token = {});

  // Stop strings for every reply (--stop): a reply ends where one appears, without it.
  void set_stop(std::vector<std::string> stop) { stop_ = std::move(stop); }
  // Context shift (--context-shift): when a message and `reply_room` tokens for its reply do not fit in what is left
  // of the context, drop the oldest exchanges until they do (the system message stays). 0: off (such a message is
  // rejected while the whole message and one reply token still do not fit).
  void set_context_shift(int64_t reply_room) { shift_reply_room_ = reply_room; }
  bool context_shift() const { return shift_reply_room_ > 0; }

  // Forgets every exchange (the system message stays) and empties the context.
  void clear();
  // Replaces the system message (empty: none), keeping the exchanges; the context is prefilled again at the next
  // message. Throws greta::Error, changing nothing, when the conversation would not fit and there is no context shift.
  void set_system(std::string system);
  // Replaces the whole conversation (a loaded one), with the same check as set_system.
  void replace(std::string system, std::vector<ChatExchange> exchanges);

  const ChatTemplate& chat_template() const { return tmpl_; }
  const std::string& system() const { return system_; }
  const std::vector<ChatExchange>& exchanges() const { return exchanges_; }
  // Messages sent since the start (exchanges dropped by a shift or /clear included).
  int64_t turns() const { return turns_; }
  // Context positions the conversation fills (the engine's context may lack a reply's last token until the next
  // message), and the context's size.
  int64_t context_used() const { return int64_t(context_tokens_.size()); }
  int64_t context_size() const { return engine_.context_size(); }
  const model::Tokenizer& tokenizer() const { return engine_.tokenizer(); }
  // The tokens of a reply's text as the context holds them (for exchanges that were loaded rather than generated).
  std::vector<engine::TokenId> reply_tokens_of(std::string_view reply) const;

private:
  bool is_end_of_turn(engine::TokenId token) const;
  // A user turn as tokens: for the conversation's first turn the BOS and the system message, for a later one the
  // closing of the reply before it; always ending with the assistant header.
  std::vector<engine::TokenId> turn_tokens(std::string_view user, bool first) const;
  // The tokens of exchanges [first, end) as the context holds them, exchange `first` being the conversation's first.
  std::vector<engine::TokenId> history_tokens(size_t first) const;
  // Drops the oldest exchanges so that the new message (`user`) and `reply_room` tokens fit; false if even the
  // message alone does not. Empties the engine's context when it drops any (the rest is prefilled again).
  bool shift_for(std::string_view user);
  // Throws (restoring the previous system message and exchanges) when the conversation does not fit.
  void check_fits(std::string previous_system, std::vector<ChatExchange> previous_exchanges);

  engine::Engine& engine_;
  ChatTemplate tmpl_;
  engine::Sampler sampler_;
  std::string system_;
  std::vector<ChatExchange> exchanges_;
  // Every token of the kept conversation, in order, up to the end of the last reply. The engine's context always
  // holds a prefix of it: all of it after a generated reply but possibly its last token (generation does not feed back
  // the token it stops on), nothing after a reset; send() prefills what is missing before the new turn.
  std::vector<engine::TokenId> context_tokens_;
  std::vector<std::string> stop_;
  int64_t shift_reply_room_ = 0;
  int64_t turns_ = 0;
  engine::TokenId end_of_turn_ = -1;  // the family's end-of-turn special token in this vocabulary, -1 if none
};

}  // namespace greta::cli
