// The CLI's JSON output (run --json, bench -o json) through nlohmann-json: objects keep their fields in the order
// written, and text that is not valid UTF-8 (a token piece that ends inside a character) becomes U+FFFD.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace greta::cli {

using Json = nlohmann::ordered_json;

// {"load_ms", "prefill_tokens", "prefill_ms", "prefill_tokens_per_s", "decode_tokens", "decode_ms",
//  "decode_tokens_per_s"}
Json timings_json(const engine::Timings& t);
// {"tokens": [...], "text", "stop", "timings": {...}}; `stop` replaces the engine's name for the stop reason.
Json result_json(const engine::GenerateResult& r, const char* stop = nullptr);
// One line of JSON text.
std::string dump_json(const Json& value);

}  // namespace greta::cli
