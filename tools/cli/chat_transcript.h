// chat's /save and /load: a conversation as a JSON file in the shape of an OpenAI chat request's messages, so that a
// saved chat can be sent to a chat-completions server as it is, and a request's messages loaded into chat:
//   {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."},
//                 {"role": "assistant", "content": "..."}, ...]}
#pragma once
#include <string>
#include <vector>

namespace greta::cli {

struct ChatTranscript {
  std::string system;  // empty: none
  struct Exchange {
    std::string user;
    std::string reply;
  };
  std::vector<Exchange> exchanges;
};

// Writes the file (replacing it). Throws greta::Error naming the file when it cannot be written.
void save_transcript(const std::string& path, const ChatTranscript& transcript);

// Reads a file save_transcript wrote, or any {"messages": [...]} / bare [...] array of messages: an optional system
// message first, then user and assistant messages in turn (a final user message without a reply is refused: chat
// would have to answer it, which /load does not do). Throws greta::Error naming the file and the problem.
ChatTranscript load_transcript(const std::string& path);

}  // namespace greta::cli
