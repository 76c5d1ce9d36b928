// libFuzzer target: any byte string handed to the server's request parsers (src/server/api.h) must either parse or
// throw ApiError — never crash, hang, read out of bounds, or throw anything else (an escaping exception aborts the
// fuzzer and counts as a crash). When a completion request parses, a CompletionResponse is built for it and fed token
// events whose text is more of the fuzzer's bytes (invalid UTF-8 included), streamed and not: every chunk and the
// final object must serialise. The input format is api_request_input.h's.
//
// tests/server/corpus/ holds seeds and the regressions; greta_server_tests replays them (tests/server/api_test.cpp).
// Run: tests/fuzz/run_api_fuzz.sh [SECONDS].
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api_request_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)greta::server::fuzz::run_input(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
