// Errors: every failure the user can cause (bad file, bad option, no device, out of memory) is a greta::Error whose
// message is one line that names the problem. The CLI prints it and exits non-zero; nothing aborts.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace greta {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// cat("a", 1, 'b') -> "a1b": message building without <format> (g++ 12 lacks it).
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void throw_error(const std::string& message);

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw_error(cat(std::forward<Args>(args)...));
}

// Internal invariant: names the condition, file and line. For user-caused errors use fail() with a real message.
#define GRETA_CHECK(cond, ...)                                                                         \
  do {                                                                                                 \
    if (!(cond))                                                                                       \
      ::greta::fail("check failed: " #cond " at ", __FILE__, ":", __LINE__ __VA_OPT__(, ": ", ) __VA_ARGS__); \
  } while (0)

// Human-readable byte counts for error messages and reports ("1.50 GiB").
std::string format_bytes(double bytes);

}  // namespace greta
