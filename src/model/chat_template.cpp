#include "model/chat_template.h"

#include "core/error.h"

namespace greta::model {

namespace {

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// Whitespace trimmed at both ends (the C locale's isspace set, as llama.cpp's trim).
std::string trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

ChatTemplate make_llama2(bool system_block, bool bos_in_history, bool strip) {
  ChatTemplate t;
  t.family = ChatFamily::Llama2;
  t.system_block = system_block;
  t.bos_in_history = bos_in_history;
  t.strip_messages = strip;
  return t;
}

ChatTemplate make_mistral(ChatTemplate::Mistral variant) {
  ChatTemplate t;
  t.family = ChatFamily::Mistral;
  t.mistral = variant;
  return t;
}

ChatTemplate make_family(ChatFamily f) {
  ChatTemplate t;
  t.family = f;
  return t;
}

struct NamedTemplate {
  const char* name;
  ChatTemplate tmpl;
};

const NamedTemplate k_named[] = {
    {"plain", make_family(ChatFamily::Plain)},
    {"chatml", make_family(ChatFamily::ChatML)},
    {"llama2", make_llama2(false, false, false)},
    {"llama2-sys", make_llama2(true, false, false)},
    {"llama2-sys-bos", make_llama2(true, true, false)},
    {"llama2-sys-strip", make_llama2(true, false, true)},
    {"llama3", make_family(ChatFamily::Llama3)},
    {"mistral-v1", make_mistral(ChatTemplate::Mistral::V1)},
    {"mistral-v3", make_mistral(ChatTemplate::Mistral::V3)},
    {"mistral-v3-tekken", make_mistral(ChatTemplate::Mistral::V3Tekken)},
    {"mistral-v7", make_mistral(ChatTemplate::Mistral::V7)},
    {"phi3", make_family(ChatFamily::Phi3)},
    {"gemma", make_family(ChatFamily::Gemma)},
    {"gpt-oss", make_family(ChatFamily::GptOss)},
};

bool same(const ChatTemplate& a, const ChatTemplate& b) {
  if (a.family != b.family) return false;
  if (a.family == ChatFamily::Llama2)
    return a.system_block == b.system_block && a.bos_in_history == b.bos_in_history &&
           a.strip_messages == b.strip_messages;
  if (a.family == ChatFamily::Mistral) return a.mistral == b.mistral;
  return true;
}

// Spacing of the mistral variants around [INST] / [/INST].
struct MistralSpacing {
  const char* leading;   // before [INST] and [/INST]
  const char* trailing;  // after [INST] (and before the reply)
};
MistralSpacing spacing(ChatTemplate::Mistral v) {
  switch (v) {
    case ChatTemplate::Mistral::V1: return {" ", " "};
    case ChatTemplate::Mistral::V3Tekken: return {"", ""};
    default: return {"", " "};
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  for (const auto& n : k_named)
    if (name == n.name) return n.tmpl;
  std::string names;
  for (const auto& n : k_named) names += cat(names.empty() ? "" : ", ", n.name);
  fail("unknown chat template '", name, "' (choose one of ", names, ")");
}

std::string ChatTemplate::name() const {
  for (const auto& n : k_named)
    if (same(*this, n.tmpl)) return n.name;
  return "?";
}

// The order of the checks follows llama.cpp's llm_chat_detect_template, so a template is put in the same family.
ChatTemplate ChatTemplate::detect(std::string_view t) {
  for (const auto& n : k_named)
    if (t == n.name) return n.tmpl;
  if (contains(t, "<|im_start|>"))  // Phi-4's <|im_sep|> variant and SmolVLM are not ChatML
    return contains(t, "<|im_sep|>") || contains(t, "<end_of_utterance>") ? make_family(ChatFamily::Plain)
                                                                          : make_family(ChatFamily::ChatML);
  if (t.substr(0, 7) == "mistral" || contains(t, "[INST]")) {
    if (contains(t, "[SYSTEM_PROMPT]")) return make_mistral(Mistral::V7);
    if (contains(t, "' [INST] ' + system_message") || contains(t, "[AVAILABLE_TOOLS]")) {
      if (contains(t, " [INST]")) return make_mistral(Mistral::V1);
      if (contains(t, "\"[INST]\"")) return make_mistral(Mistral::V3Tekken);
      return make_mistral(Mistral::V3);
    }
    const bool system_block = contains(t, "<<SYS>>");
    if (contains(t, "content.strip()")) return make_llama2(true, false, true);
    if (contains(t, "bos_token + '[INST]")) return make_llama2(true, true, false);
    return make_llama2(system_block, false, false);
  }
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return make_family(ChatFamily::Phi3);
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return make_family(ChatFamily::Llama3);
  if (contains(t, "<start_of_turn>")) return make_family(ChatFamily::Gemma);
  if (contains(t, "<|start|>") && contains(t, "<|channel|>")) return make_family(ChatFamily::GptOss);
  return make_family(ChatFamily::Plain);
}

std::string_view ChatTemplate::reply_end() const {
  switch (family) {
    case ChatFamily::ChatML: return "<|im_end|>\n";
    case ChatFamily::Llama3: return "<|eot_id|>";
    case ChatFamily::Llama2:
    case ChatFamily::Mistral: return "</s>";
    case ChatFamily::Phi3: return "<|end|>\n";
    case ChatFamily::Gemma: return "<end_of_turn>\n";
    case ChatFamily::GptOss: return "<|return|>";
    case ChatFamily::Plain: return "\n";
  }
  return "";
}

std::string_view ChatTemplate::end_of_turn_token() const {
  switch (family) {
    case ChatFamily::ChatML: return "<|im_end|>";
    case ChatFamily::Llama3: return "<|eot_id|>";
    case ChatFamily::Llama2:
    case ChatFamily::Mistral: return "</s>";
    case ChatFamily::Phi3: return "<|end|>";
    case ChatFamily::Gemma: return "<end_of_turn>";
    case ChatFamily::GptOss: return "<|return|>";
    case ChatFamily::Plain: return "";
  }
  return "";
}

std::vector<std::string_view> ChatTemplate::special_markers() const {
  switch (family) {
    case ChatFamily::ChatML: return {"<|im_start|>", "<|im_end|>"};
    case ChatFamily::Llama3: return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFamily::Phi3: return {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
    case ChatFamily::Gemma: return {"<start_of_turn>", "<end_of_turn>"};
    case ChatFamily::GptOss: return {"<|start|>", "<|message|>", "<|end|>", "<|return|>", "<|channel|>"};
    case ChatFamily::Llama2: return {"</s>"};  // [INST] is plain text in Llama 2's vocabulary
    case ChatFamily::Mistral:
      // v1 (Mistral 7B v0.1, Mixtral) spells [INST] in text; later vocabularies have control tokens for it.
      if (mistral == Mistral::V1) return {"</s>"};
      if (mistral == Mistral::V7) return {"[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]", "</s>"};
      return {"[INST]", "[/INST]", "</s>"};
    case ChatFamily::Plain: return {};
  }
  return {};
}

std::vector<std::string_view> missing_special_markers(const ChatTemplate& tmpl, const Tokenizer& tokenizer) {
  std::vector<std::string_view> missing;
  for (std::string_view marker : tmpl.special_markers()) {
    const auto ids = tokenizer.encode(marker, /*add_special=*/false, /*parse_special=*/true);
    if (ids.size() != 1 || tokenizer.token_text(ids[0]) != marker) missing.push_back(marker);
  }
  return missing;
}

// A transcription of llama.cpp's llm_chat_apply_template for these families (message by message, with its state),
// with the template's markup and the messages' content kept apart.
std::vector<ChatSegment> render_conversation_segments(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                                                      bool add_assistant) {
  std::vector<ChatSegment> out;
  auto markup = [&](std::string text) {
    if (!text.empty()) out.push_back({std::move(text), true});
  };
  auto content = [&](std::string_view text) {
    if (!text.empty()) out.push_back({std::string(text), false});
  };
  switch (tmpl.family) {
    case ChatFamily::ChatML:
      for (const auto& m : messages) markup(cat("<|im_start|>", m.role, "\n")), content(m.content), markup("<|im_end|>\n");
      if (add_assistant) markup("<|im_start|>assistant\n");
      break;
    case ChatFamily::Llama3:
      for (const auto& m : messages)
        markup(cat("<|start_header_id|>", m.role, "<|end_header_id|>\n\n")), content(trim(m.content)), markup("<|eot_id|>");
      if (add_assistant) markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatFamily::Phi3:
      for (const auto& m : messages) markup(cat("<|", m.role, "|>\n")), content(m.content), markup("<|end|>\n");
      if (add_assistant) markup("<|assistant|>\n");
      break;
    case ChatFamily::Gemma: {
      // No system role: the system text opens the next user turn. The assistant is "model".
      std::string system;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system += trim(m.content);
          continue;
        }
        const bool model = m.role == "assistant";
        markup(cat("<start_of_turn>", model ? std::string("model") : m.role, "\n"));
        if (!system.empty() && !model) content(system), markup("\n\n"), system.clear();
        content(trim(m.content)), markup("<end_of_turn>\n");
      }
      if (add_assistant) markup("<start_of_turn>model\n");
      break;
    }
    case ChatFamily::GptOss:
      // Harmony, as llama.cpp writes it: the model's reply then opens with <|channel|>analysis or final
      // (model/harmony.h splits them).
      for (const auto& m : messages)
        markup(cat("<|start|>", m.role, "<|message|>")), content(m.content),
            markup(m.role == "assistant" ? "<|return|>" : "<|end|>");
      if (add_assistant) markup("<|start|>assistant");
      break;
    case ChatFamily::Llama2: {
      bool inside_turn = true;  // the first "[INST] " is written up front (the BOS comes from the tokenizer)
      markup("[INST] ");
      for (const auto& m : messages) {
        const std::string text = tmpl.strip_messages ? trim(m.content) : m.content;
        if (!inside_turn) {
          inside_turn = true;
          markup(tmpl.bos_in_history ? "<s>[INST] " : "[INST] ");
        }
        if (m.role == "system") {
          if (tmpl.system_block) markup("<<SYS>>\n"), content(text), markup("\n<</SYS>>\n\n");
          else content(text), markup("\n");
        } else if (m.role == "user") {
          content(text), markup(" [/INST]");
        } else {
          content(text), markup("</s>");
          inside_turn = false;
        }
      }
      break;
    }
    case ChatFamily::Mistral: {
      if (tmpl.mistral == ChatTemplate::Mistral::V7) {
        for (const auto& m : messages) {
          if (m.role == "system") markup("[SYSTEM_PROMPT] "), content(m.content), markup("[/SYSTEM_PROMPT]");
          else if (m.role == "user") markup("[INST] "), content(m.content), markup("[/INST]");
          else markup(" "), content(m.content), markup("</s>");
        }
        break;
      }
      const MistralSpacing s = spacing(tmpl.mistral);
      const bool trim_reply = tmpl.mistral == ChatTemplate::Mistral::V3;
      bool inside_turn = false;
      for (const auto& m : messages) {
        if (!inside_turn) {
          markup(cat(s.leading, "[INST]", s.trailing));
          inside_turn = true;
        }
        if (m.role == "system") content(m.content), markup("\n\n");
        else if (m.role == "user") content(m.content), markup(cat(s.leading, "[/INST]"));
        else {
          markup(s.trailing), content(trim_reply ? trim(m.content) : m.content), markup("</s>");
          inside_turn = false;
        }
      }
      break;
    }
    case ChatFamily::Plain:
      for (const auto& m : messages) {
        if (m.role == "system") content(m.content), markup("\n\n");
        else if (m.role == "user") content(m.content);
        else content(m.content), markup("\n");
      }
      break;
  }
  return out;
}

std::string render_conversation(const ChatTemplate& tmpl, std::span<const ChatMessage> messages, bool add_assistant) {
  std::string out;
  for (const ChatSegment& s : render_conversation_segments(tmpl, messages, add_assistant)) out += s.text;
  return out;
}

std::vector<ChatSegment> render_turn(const ChatTemplate& tmpl, std::string_view system, std::string_view user,
                                     bool first_turn) {
  // The turn is the conversation of (system,) user with the assistant's prompt, after the end of the previous
  // reply; a Llama 2 template that repeats BOS in the history opens later turns with "<s>".
  std::vector<ChatMessage> messages;
  if (first_turn && !system.empty()) messages.push_back({"system", std::string(system)});
  messages.push_back({"user", std::string(user)});
  std::vector<ChatSegment> out;
  if (!first_turn && !tmpl.reply_end().empty()) out.push_back({std::string(tmpl.reply_end()), true});
  std::vector<ChatSegment> turn = render_conversation_segments(tmpl, messages, /*add_assistant=*/true);
  if (!first_turn && tmpl.family == ChatFamily::Llama2 && tmpl.bos_in_history && !turn.empty())
    turn.front().text = "<s>" + turn.front().text;
  out.insert(out.end(), std::make_move_iterator(turn.begin()), std::make_move_iterator(turn.end()));
  return out;
}

std::vector<model::TokenId> tokenize_segments(const model::Tokenizer& tokenizer, std::span<const ChatSegment> segments,
                                              bool add_bos) {
  std::vector<model::Tokenizer::Segment> parts;
  parts.reserve(segments.size());
  for (const auto& s : segments) parts.push_back({s.text, s.is_markup});
  // BOS by hand: encode's add_special would also append an EOS on models that add one, which a chat turn must not.
  std::vector<model::TokenId> ids;
  if (add_bos && tokenizer.add_bos() && tokenizer.bos() >= 0) ids.push_back(tokenizer.bos());
  const auto body = tokenizer.encode_segments(parts, /*add_special=*/false);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace greta::model
