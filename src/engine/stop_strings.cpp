#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace greta::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view piece) {
  if (matched_) return {};
  held_.append(piece);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest complete stop string ends the text there.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string: it may still complete.
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() { return matched_ ? std::string() : std::exchange(held_, {}); }

}  // namespace greta::engine
