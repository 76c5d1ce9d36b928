// UTF-8-safe streaming of generated text (the CLI's output, the server's SSE chunks and JSON strings).
#pragma once
#include <string>
#include <string_view>

namespace greta {

// Generated text arrives in token pieces that may split a UTF-8 character (byte-fallback tokens, byte-level BPE).
// push() returns the bytes that are safe to print now: complete characters, with an incomplete sequence at the end
// held back until its continuation bytes arrive. Bytes that can never form a valid character become U+FFFD, so the
// output is always valid UTF-8. finish() returns what is still held (as U+FFFD: it was never completed).
class Utf8Stream {
public:
  std::string push(std::string_view piece);
  std::string finish();

private:
  std::string pending_;
};

}  // namespace greta
