#include "chat_transcript.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace greta::cli {

namespace {

constexpr std::streamoff kMaxTranscriptBytes = std::streamoff(64) << 20;

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // written in the order given: "role" before "content", as people read it

ordered_json message(const char* role, const std::string& content) {
  return ordered_json{{"role", role}, {"content", content}};
}

}  // namespace

void save_transcript(const std::string& path, const ChatTranscript& transcript) {
  ordered_json messages = ordered_json::array();
  if (!transcript.system.empty()) messages.push_back(message("system", transcript.system));
  for (const auto& exchange : transcript.exchanges) {
    messages.push_back(message("user", exchange.user));
    messages.push_back(message("assistant", exchange.reply));
  }
  // A reply cut inside a UTF-8 character (an interrupted or token-limited one) must not make the file unreadable:
  // invalid bytes become U+FFFD.
  const std::string text =
      ordered_json{{"messages", messages}}.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, ": cannot write it: ", std::strerror(errno));
  out.write(text.data(), std::streamsize(text.size()));
  out.close();
  if (!out) fail(path, ": write error");
}

ChatTranscript load_transcript(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open it: ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  if (in.tellg() > kMaxTranscriptBytes) fail(path, ": larger than 64 MiB");
  in.seekg(0);
  std::stringstream text;
  text << in.rdbuf();
  const json document = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) fail(path, ": not JSON");
  const json* messages = &document;
  if (document.is_object()) {
    if (!document.contains("messages")) fail(path, ": no \"messages\" array");
    messages = &document["messages"];
  }
  if (!messages->is_array()) fail(path, ": \"messages\" is not an array");

  ChatTranscript transcript;
  std::string expected = "user";  // the role the next message must have
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      fail(path, ": message ", i + 1, " is not {\"role\": \"...\", \"content\": \"...\"}");
    const std::string role = m["role"].get<std::string>();
    const std::string content = m["content"].get<std::string>();
    if (i == 0 && role == "system") {
      transcript.system = content;
      continue;
    }
    if (role != expected) fail(path, ": message ", i + 1, " is from '", role, "' where '", expected, "' comes next");
    if (role == "user") transcript.exchanges.push_back({content, ""});
    else transcript.exchanges.back().reply = content;
    expected = role == "user" ? "assistant" : "user";
  }
  if (expected == "assistant")
    fail(path, ": the last message is the user's, without a reply (send it as a message instead)");
  return transcript;
}

}  // namespace greta::cli
