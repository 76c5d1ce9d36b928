#include "json_output.h"

namespace greta::cli {

Json timings_json(const engine::Timings& t) {
  return {{"load_ms", t.load_s * 1e3},
          {"prefill_tokens", t.prefill_tokens},
          {"prefill_ms", t.prefill_s * 1e3},
          {"prefill_tokens_per_s", t.prefill_tokens_per_s()},
          {"decode_tokens", t.decode_tokens},
          {"decode_ms", t.decode_s * 1e3},
          {"decode_tokens_per_s", t.decode_tokens_per_s()}};
}

Json result_json(const engine::GenerateResult& r, const char* stop) {
  return {{"tokens", r.tokens},
          {"text", r.text},
          {"stop", stop ? stop : engine::stop_reason_name(r.stop)},
          {"timings", timings_json(r.timings)}};
}

std::string dump_json(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace greta::cli
