// Chat templates: the common families, detected from a model's tokenizer.chat_template text the way llama.cpp's
// llm_chat_detect_template does (no Jinja interpreter: each family is a fixed format), rendered exactly as llama.cpp's
// llm_chat_apply_template renders them, and split into turns so a conversation can keep its KV cache: each turn
// appends only the closing of the previous reply, the new user message and the assistant header.
//
//   family    marker in the template          one turn (S = system, U = user, A = reply as generated)
//   chatml    <|im_start|>                    <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n
//                                             <|im_start|>assistant\n A <|im_end|>\n
//   llama3    <|start_header_id|>             <|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>
//                                             <|start_header_id|>assistant<|end_header_id|>\n\n A <|eot_id|>
//   llama2    [INST] (and <<SYS>>)            [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s> [<s>]"[INST] " ...
//   mistral   [INST] + [AVAILABLE_TOOLS] /    [INST] S\n\nU[/INST] A </s>   (v1 / v3 / v3-tekken / v7 spacing)
//             [SYSTEM_PROMPT]
//   phi3      <|assistant|> and <|end|>       <|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n A <|end|>\n
//   plain     anything else (no template)     S\n\n U A \n U ...   (raw text: the model just continues)
//
// The template's markup is tokenized with special-token parsing on, the user's text with it off (so a user who
// types "<|im_end|>" cannot forge a turn boundary).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace greta::model {

enum class ChatFamily { Plain, ChatML, Llama2, Llama3, Mistral, Phi3, Gemma, GptOss };

struct ChatTemplate {
  ChatFamily family = ChatFamily::Plain;
  // llama2 variants (llama.cpp's llama2 / llama2-sys / llama2-sys-bos / llama2-sys-strip)
  bool system_block = false;     // <<SYS>> ... <</SYS>> around the system message
  bool bos_in_history = false;   // "<s>" before every [INST] after the first
  bool strip_messages = false;   // messages are trimmed
  // mistral variants (v1: " [INST] " and " [/INST]"; v3: "[INST] "; v3-tekken: "[INST]"; v7: [SYSTEM_PROMPT])
  enum class Mistral { V1, V3, V3Tekken, V7 } mistral = Mistral::V3;

  // The family of a tokenizer.chat_template text (empty: plain), or of a name as --chat-template takes it.
  static ChatTemplate detect(std::string_view template_text);
  // "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "llama3", "mistral-v1", "mistral-v3",
  // "mistral-v3-tekken", "mistral-v7", "phi3", "plain"; throws greta::Error naming the choices otherwise.
  static ChatTemplate from_name(std::string_view name);
  std::string name() const;

  // The text that closes an assistant reply ("<|im_end|>\n", "<|eot_id|>", "</s>", "<|end|>\n", "\n").
  std::string_view reply_end() const;
  // The special token text that ends a reply, when the family has one besides EOS ("<|im_end|>", ...), else "".
  std::string_view end_of_turn_token() const;
  // The markup that the family's models have as special tokens, one token each ("<|im_start|>" and "<|im_end|>" for
  // chatml, "</s>" for llama2); empty for plain.
  std::vector<std::string_view> special_markers() const;
};

// The special markers of `tmpl` that are not one special token of `tokenizer`'s vocabulary. A template forced on a
// model whose vocabulary lacks them still renders, but its turn boundaries become ordinary text tokens that the model
// never learned as such.
std::vector<std::string_view> missing_special_markers(const ChatTemplate& tmpl, const Tokenizer& tokenizer);

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// A piece of rendered chat text: template markup (special tokens recognised) or message content (not).
struct ChatSegment {
  std::string text;
  bool is_markup = true;
};

// The whole conversation as llama.cpp's llm_chat_apply_template renders it (add_assistant: end with the assistant
// header so the model answers next). Messages are system (first only), user and assistant.
std::string render_conversation(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant);
// The same as segments: template markup apart from message content (the server tokenizes them with
// tokenize_segments, so a message cannot forge the template's special tokens).
std::vector<ChatSegment> render_conversation_segments(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                                                      bool add_assistant);

// One turn of a running conversation: for the first turn the optional system message and the user message, for later
// ones the closing of the previous reply first; always ending with the assistant header. Concatenating the turns with
// the replies in between gives render_conversation's text (with replies as the model wrote them).
std::vector<ChatSegment> render_turn(const ChatTemplate& tmpl, std::string_view system, std::string_view user,
                                     bool first_turn);

// The segments as token ids: markup with special tokens parsed, content without (Tokenizer::encode_segments).
// add_bos: prepend the model's BOS when it adds one (first turn).
std::vector<model::TokenId> tokenize_segments(const model::Tokenizer& tokenizer, std::span<const ChatSegment> segments,
                                              bool add_bos);

}  // namespace greta::model
