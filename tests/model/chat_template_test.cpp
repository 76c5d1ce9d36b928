// Chat templates: each family renders llama.cpp's standard test conversation as its llm_chat_apply_template does
// (expected strings written out by hand from each family's rules), and a chat built turn by turn (render_turn, what
// `chat` sends) is the same text as the whole conversation rendered at once.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/harmony.h"
#include "model/tokenizer.h"

using namespace greta::model;

namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"},           {"assistant", "Hi there"},
    {"user", "Who are you"},                   {"assistant", "   I am an assistant   "}, {"user", "Another question"},
};

std::string text_of(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const auto& s : segments) out += s.text;
  return out;
}

}  // namespace

TEST_CASE("chat templates: the standard conversation in each family") {
  CHECK(render_conversation(ChatTemplate::from_name("chatml"), kConversation, true) ==
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
        "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
        "<|im_start|>assistant\n");
  // Gemma: no system role (it opens the first user turn), "model" for the assistant, messages trimmed.
  CHECK(render_conversation(ChatTemplate::from_name("gemma"), kConversation, true) ==
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there"
        "<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant"
        "<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
  // gpt-oss (harmony): <|start|>ROLE<|message|>TEXT, ended by <|end|>, or <|return|> for the assistant.
  CHECK(render_conversation(ChatTemplate::from_name("gpt-oss"), kConversation, true) ==
        "<|start|>system<|message|>You are a helpful assistant<|end|><|start|>user<|message|>Hello<|end|>"
        "<|start|>assistant<|message|>Hi there<|return|><|start|>user<|message|>Who are you<|end|>"
        "<|start|>assistant<|message|>   I am an assistant   <|return|><|start|>user<|message|>Another question"
        "<|end|><|start|>assistant");
  CHECK(render_conversation(ChatTemplate::from_name("phi3"), kConversation, true) ==
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
        "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question"
        "<|end|>\n<|assistant|>\n");
}

TEST_CASE("chat templates: detection from the template text") {
  CHECK(ChatTemplate::detect("{{ '<start_of_turn>' + role + '\\n' }}").family == ChatFamily::Gemma);
  CHECK(ChatTemplate::detect("{{ '<|start|>' + role + '<|channel|>' }}").family == ChatFamily::GptOss);
  CHECK(ChatTemplate::detect("<|im_start|>").family == ChatFamily::ChatML);
  CHECK(ChatTemplate::detect("nothing known").family == ChatFamily::Plain);
  CHECK(ChatTemplate::from_name("gemma").name() == "gemma");
  CHECK(ChatTemplate::from_name("gpt-oss").end_of_turn_token() == "<|return|>");
}

TEST_CASE("chat templates: turn by turn is the whole conversation, in every family") {
  for (const char* name : {"chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama3", "mistral-v1", "mistral-v3",
                           "mistral-v7", "phi3", "gemma", "gpt-oss"}) {
    CAPTURE(name);
    const ChatTemplate t = ChatTemplate::from_name(name);
    // Replies as the model writes them (no surrounding spaces, which some families trim in the history).
    const std::vector<ChatMessage> conv = {{"system", "Be brief."}, {"user", "Hello"}, {"assistant", "Hi there"},
                                           {"user", "Who are you"}, {"assistant", "An assistant"}, {"user", "Bye"}};
    std::string turns = text_of(render_turn(t, "Be brief.", "Hello", true));
    turns += "Hi there" + text_of(render_turn(t, "", "Who are you", false));
    turns += "An assistant" + text_of(render_turn(t, "", "Bye", false));
    std::string whole = render_conversation(t, conv, true);
    // What the model writes itself before its reply's text: Mistral's history has a space after "[/INST]";
    // gpt-oss's reply opens with its channel header, up to <|message|>.
    const char* reply_prefix = t.family == ChatFamily::GptOss                                             ? "<|message|>"
                               : t.family == ChatFamily::Mistral && t.mistral != ChatTemplate::Mistral::V3Tekken ? " "
                                                                                                                   : "";
    for (const char* reply : {"Hi there", "An assistant"}) {
      const size_t at = turns.find(reply);
      REQUIRE(at != std::string::npos);
      turns.insert(at, reply_prefix);
    }
    CHECK(turns == whole);
  }
}

TEST_CASE("harmony: gpt-oss's analysis channel is reasoning, the final channel the answer, the markup neither") {
  TokenizerVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>",
              "analysis", "final", "assistant", "▁think", "▁answer"};
  v.token_types = {2, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1};
  const Tokenizer tok = Tokenizer::from_vocab(v);
  HarmonyReply h(tok);
  REQUIRE(h.active());
  using P = HarmonyReply::Part;
  // <|channel|>analysis<|message|> think<|end|><|start|>assistant<|channel|>final<|message|> answer<|return|>
  const std::vector<std::pair<TokenId, P>> reply = {{3, P::Markup}, {8, P::Markup},  {4, P::Markup},
                                                    {11, P::Reasoning}, {6, P::Markup}, {5, P::Markup},
                                                    {10, P::Markup}, {3, P::Markup}, {9, P::Markup},
                                                    {4, P::Markup}, {12, P::Answer}, {7, P::Answer}};
  for (const auto& [id, part] : reply) {
    CAPTURE(id);
    CHECK(h.feed(id, tok.token_text(id)) == part);
  }
  // A reply with no channel header is an answer as it is; a vocabulary without the markup is never harmony.
  HarmonyReply plain(tok);
  CHECK(plain.feed(12, "▁answer") == P::Answer);
  v.tokens[3] = "<|other|>";
  CHECK_FALSE(HarmonyReply(Tokenizer::from_vocab(v)).active());
}
