#include "chat_session.h"

#include <algorithm>

#include "core/error.h"

namespace greta::cli {

ChatSession::ChatSession(engine::Engine& engine, ChatTemplate tmpl, const engine::SamplerParams& sampling,
                         std::string system)
    : engine_(engine), tmpl_(tmpl), sampler_(sampling), system_(std::move(system)) {
  if (engine_.n_past() != 0) fail("a chat session needs an empty context");
  // The family's end-of-turn marker ("<|im_end|>", "<|eot_id|>", "<|end|>"), when the vocabulary has it as a special
  // token: it ends a reply even if the model's metadata does not mark it end-of-generation.
  const std::string_view marker = tmpl_.end_of_turn_token();
  if (!marker.empty()) {
    const auto ids = engine_.tokenizer().encode(marker, /*add_special=*/false, /*parse_special=*/true);
    if (ids.size() == 1 && engine_.tokenizer().token_text(ids[0]) == marker) end_of_turn_ = ids[0];
  }
}

bool ChatSession::is_end_of_turn(engine::TokenId token) const {
  return token == end_of_turn_ || engine_.tokenizer().is_end_of_generation(token);
}

std::vector<engine::TokenId> ChatSession::turn_tokens(std::string_view user, bool first) const {
  return model::tokenize_segments(engine_.tokenizer(), model::render_turn(tmpl_, system_, user, first),
                                  /*add_bos=*/first);
}

std::vector<engine::TokenId> ChatSession::history_tokens(size_t first) const {
  std::vector<engine::TokenId> tokens;
  for (size_t i = first; i < exchanges_.size(); ++i) {
    const auto turn = turn_tokens(exchanges_[i].user, i == first);
    tokens.insert(tokens.end(), turn.begin(), turn.end());
    tokens.insert(tokens.end(), exchanges_[i].reply_tokens.begin(), exchanges_[i].reply_tokens.end());
  }
  return tokens;
}

std::vector<engine::TokenId> ChatSession::reply_tokens_of(std::string_view reply) const {
  const ChatSegment content{std::string(reply), /*is_markup=*/false};
  return model::tokenize_segments(engine_.tokenizer(), std::span(&content, 1), /*add_bos=*/false);
}

bool ChatSession::shift_for(std::string_view user) {
  const int64_t ctx = engine_.context_size();
  const size_t n = exchanges_.size();
  // The size of the context that keeps exchanges [k, n) and adds the message: exchange k becomes the first (it gets
  // the BOS and the system message), the later ones keep their tokens.
  std::vector<int64_t> later(n + 1, 0);  // later[k]: tokens of exchanges (k, n) as non-first ones
  for (size_t i = n; i-- > 1;)
    later[i - 1] =
        later[i] + int64_t(turn_tokens(exchanges_[i].user, false).size() + exchanges_[i].reply_tokens.size());
  auto needed_keeping_from = [&](size_t k) {
    if (k == n) return int64_t(turn_tokens(user, true).size());
    return int64_t(turn_tokens(exchanges_[k].user, true).size() + exchanges_[k].reply_tokens.size()) + later[k] +
           int64_t(turn_tokens(user, false).size());
  };
  // Keep as many recent exchanges as leave room for the reply; failing that, keep none if the message then fits at
  // all (its reply may be cut short).
  size_t keep_from = n + 1;
  for (size_t k = 1; k <= n && keep_from > n; ++k)
    if (needed_keeping_from(k) + shift_reply_room_ <= ctx) keep_from = k;
  if (keep_from > n) {
    if (needed_keeping_from(n) + 1 > ctx) return false;
    keep_from = n;
  }
  exchanges_.erase(exchanges_.begin(), exchanges_.begin() + ptrdiff_t(keep_from));
  context_tokens_ = history_tokens(0);
  engine_.reset();
  return true;
}

ChatTurn ChatSession::send(std::string_view user, int64_t max_reply_tokens, const engine::TokenCallback& on_token) {
  const int64_t ctx = engine_.context_size();
  const int64_t n_past = engine_.n_past();
  GRETA_CHECK(n_past <= int64_t(context_tokens_.size()) &&
              std::equal(engine_.history().begin(), engine_.history().end(), context_tokens_.begin()));
  ChatTurn turn;
  std::vector<engine::TokenId> tokens = turn_tokens(user, exchanges_.empty());
  turn.message_tokens = int64_t(tokens.size());
  if (tokens.empty()) {
    turn.rejected = true;
    return turn;
  }
  // With a context shift, room for a reply of reply_room tokens; without, for one token at least.
  const int64_t reply_room = context_shift() ? shift_reply_room_ : 1;
  if (int64_t(context_tokens_.size() + tokens.size()) + reply_room > ctx) {
    const size_t before = exchanges_.size();
    if (!context_shift() || !shift_for(user)) {
      turn.rejected = true;
      turn.fits_alone = int64_t(turn_tokens(user, true).size()) + reply_room <= ctx;
      return turn;
    }
    turn.dropped_exchanges = int64_t(before - exchanges_.size());
    tokens = turn_tokens(user, exchanges_.empty());
  }

  // What the context lacks of the conversation (after a reset; a reply's last token), then the new turn.
  std::vector<engine::TokenId> prefill(context_tokens_.begin() + engine_.n_past(), context_tokens_.end());
  prefill.insert(prefill.end(), tokens.begin(), tokens.end());
  turn.new_tokens = int64_t(prefill.size());

  bool ended_turn = false;
  auto forward = [&](engine::TokenId token, std::string_view piece) {
    if (is_end_of_turn(token)) {  // a marker that is not an EOG token for the engine: stop without showing it
      ended_turn = true;
      return false;
    }
    return on_token ? on_token(token, piece) : true;
  };
  turn.reply =
      engine_.generate(prefill, sampler_, max_reply_tokens, /*stop_at_end_of_generation=*/true, forward, stop_);
  if (ended_turn && !turn.reply.tokens.empty()) {
    // The marker was appended to the reply before the callback saw it; it is not part of the answer (and it was not
    // fed to the model: the next turn's reply_end() starts with it). With stop strings a marker's text may still
    // have been held back, and then it is not in the text.
    const std::string marker_piece = engine_.tokenizer().token_to_piece(turn.reply.tokens.back());
    turn.reply.tokens.pop_back();
    if (turn.reply.text.size() >= marker_piece.size() &&
        turn.reply.text.compare(turn.reply.text.size() - marker_piece.size(), marker_piece.size(), marker_piece) == 0)
      turn.reply.text.resize(turn.reply.text.size() - marker_piece.size());
    turn.reply.stop = engine::StopReason::EndOfGeneration;
  }
  turn.context_full = turn.reply.stop == engine::StopReason::ContextFull;
  context_tokens_.insert(context_tokens_.end(), tokens.begin(), tokens.end());
  context_tokens_.insert(context_tokens_.end(), turn.reply.tokens.begin(), turn.reply.tokens.end());
  exchanges_.push_back({std::string(user), turn.reply.text, turn.reply.tokens});
  ++turns_;
  return turn;
}

void ChatSession::clear() {
  exchanges_.clear();
  context_tokens_.clear();
  engine_.reset();
}

void ChatSession::check_fits(std::string previous_system, std::vector<ChatExchange> previous_exchanges) {
  std::vector<engine::TokenId> tokens = history_tokens(0);
  // Without a context shift the conversation must fit whole, with room for one more message's first token.
  if (!context_shift() && int64_t(tokens.size()) + 1 > engine_.context_size()) {
    const size_t needed = tokens.size();
    system_ = std::move(previous_system);
    exchanges_ = std::move(previous_exchanges);
    fail("the conversation would need ", needed, " tokens, more than the context of ", engine_.context_size(),
         " (use a larger --ctx, or --context-shift to keep its most recent exchanges)");
  }
  context_tokens_ = std::move(tokens);
  engine_.reset();  // everything after the BOS depends on the system message: prefilled again at the next message
}

void ChatSession::set_system(std::string system) {
  std::string previous = std::exchange(system_, std::move(system));
  check_fits(std::move(previous), exchanges_);
}

void ChatSession::replace(std::string system, std::vector<ChatExchange> exchanges) {
  std::string previous_system = std::exchange(system_, std::move(system));
  std::vector<ChatExchange> previous_exchanges = std::exchange(exchanges_, std::move(exchanges));
  check_fits(std::move(previous_system), std::move(previous_exchanges));
}

}  // namespace greta::cli
