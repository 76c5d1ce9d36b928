#include "chat_session.h"

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

ChatTurn ChatSession::send(std::string_view user, int64_t max_reply_tokens, const engine::TokenCallback& on_token) {
  const bool first = turns_ == 0;
  const auto segments = model::render_turn(tmpl_, system_, user, first);
  const auto tokens = model::tokenize_segments(engine_.tokenizer(), segments, /*add_bos=*/first);
  ChatTurn turn;
  turn.new_tokens = int64_t(tokens.size());
  // Room for the new tokens and at least one reply token fed back.
  if (tokens.empty() || engine_.n_past() + int64_t(tokens.size()) >= engine_.context_size()) {
    turn.context_full = !tokens.empty();
    turn.new_tokens = 0;
    return turn;
  }

  bool ended_turn = false;
  auto forward = [&](engine::TokenId token, std::string_view piece) {
    if (is_end_of_turn(token)) {  // a marker that is not an EOG token for the engine: stop without showing it
      ended_turn = true;
      return false;
    }
    return on_token ? on_token(token, piece) : true;
  };
  turn.reply = engine_.generate(tokens, sampler_, max_reply_tokens, /*stop_at_end_of_generation=*/true, forward, stop_);
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
  ++turns_;
  return turn;
}

}  // namespace greta::cli
