// Stop strings matched across token boundaries (`--stop`, the server's `stop`). Generated text is released only once
// it can no longer be the start of a stop string; when one completes, generation ends and neither it nor anything
// after it is released. Without stop strings every piece is released as it comes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace greta::engine {

class StopMatcher {
public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Appends a token's text; returns what is now safe to show (ending before the stop string when one completed).
  std::string push(std::string_view piece);
  // The text still held back (generation ended without completing a stop string).
  std::string flush();
  bool matched() const { return matched_; }

private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace greta::engine
