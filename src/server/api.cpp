#include "server/api.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace greta::server {

namespace {

[[noreturn]] void bad(std::string param, std::string message) {
  throw ApiError{400, std::move(message), std::move(param), ""};
}

// Nesting depth of arrays and objects, outside strings; stops counting once past `limit`.
int json_depth(std::string_view body, int limit) {
  int depth = 0, max = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      max = std::max(max, ++depth);
      if (max > limit) return max;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max;
}

// Typed access to a request object's optional fields: absent and null are "not given"; anything else must have the
// right type and range, or the request is refused naming the field.
class Fields {
public:
  explicit Fields(const json& object) : object_(object) {}

  const json* get(const char* name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> boolean(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(name, cat("'", name, "' must be a boolean"));
    return v->get<bool>();
  }
  std::optional<double> number(const char* name, double lo, double hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad(name, cat("'", name, "' must be a number"));
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) bad(name, cat("'", name, "' is ", x, "; it must be between ", lo, " and ", hi));
    return x;
  }
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) bad(name, cat("'", name, "' must be an integer"));
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(name, cat("'", name, "' is too large"));
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) bad(name, cat("'", name, "' is ", x, "; it must be between ", lo, " and ", hi));
    return x;
  }
  std::optional<std::string> string(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(name, cat("'", name, "' must be a string"));
    return v->get<std::string>();
  }

private:
  const json& object_;
};

// A message's content: a string, or an array of text parts ({"type": "text", "text": ...}).
std::string message_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, cat("'", param, "' must be a string or an array of text parts"));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = cat(param, "[", i, "]");
    if (!part.is_object()) bad(where, cat("'", where, "' must be an object"));
    const auto type = Fields(part).string("type");
    if (type != "text") bad(where + ".type", cat("'", where, ".type' must be \"text\" (only text is supported)"));
    const auto part_text = Fields(part).string("text");
    if (!part_text) bad(where + ".text", cat("'", where, ".text' must be a string"));
    text += *part_text;
  }
  return text;
}

std::vector<model::ChatMessage> parse_messages(const json& body, const RequestLimits& limits) {
  const auto it = body.find("messages");
  if (it == body.end() || it->is_null()) bad("messages", "'messages' is required");
  if (!it->is_array()) bad("messages", "'messages' must be an array");
  if (it->empty()) bad("messages", "'messages' must not be empty");
  if (it->size() > limits.max_messages) bad("messages", cat("'messages' has more than ", limits.max_messages, " entries"));
  std::vector<model::ChatMessage> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = cat("messages[", i, "]");
    if (!m.is_object()) bad(where, cat("'", where, "' must be an object"));
    const auto role = Fields(m).string("role");
    if (!role) bad(where + ".role", cat("'", where, ".role' is required"));
    std::string r = *role == "developer" ? "system" : *role;
    if (r != "system" && r != "user" && r != "assistant")
      bad(where + ".role", cat("'", where, ".role' is \"", *role, "\"; supported: system, developer, user, assistant"));
    const json* content = Fields(m).get("content");
    if (!content) bad(where + ".content", cat("'", where, ".content' is required"));
    out.push_back({std::move(r), message_content(*content, where + ".content")});
  }
  if (out.back().role == "assistant")
    bad("messages", "the last message is the assistant's; the conversation must end with a user or system message");
  return out;
}

std::vector<std::string> parse_stop(const Fields& f, const RequestLimits& limits) {
  const json* v = f.get("stop");
  std::vector<std::string> out;
  if (!v) return out;
  const auto add = [&](const json& s, const std::string& where) {
    if (!s.is_string()) bad("stop", cat("'", where, "' must be a string"));
    std::string text = s.get<std::string>();
    if (text.size() > limits.max_stop_bytes) bad("stop", cat("'", where, "' is longer than ", limits.max_stop_bytes, " bytes"));
    if (!text.empty()) out.push_back(std::move(text));
  };
  if (v->is_string()) add(*v, "stop");
  else if (v->is_array()) {
    if (v->size() > size_t(limits.max_stop)) bad("stop", cat("'stop' has more than ", limits.max_stop, " strings"));
    for (size_t i = 0; i < v->size(); ++i) add((*v)[i], cat("stop[", i, "]"));
  } else {
    bad("stop", "'stop' must be a string or an array of strings");
  }
  return out;
}

void parse_prompt(const json& body, CompletionRequest& r) {
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad("prompt", "'prompt' is required");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];  // ["text"]: one prompt
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) bad("prompt", "'prompt' must not be empty");
    return;
  }
  if (!p->is_array() || p->empty()) bad("prompt", "'prompt' must be a string, or an array of token ids");
  for (size_t i = 0; i < p->size(); ++i) {
    const json& t = (*p)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad("prompt", cat("'prompt[", i, "]' must be a token id (a non-negative integer); several prompts in one "
                        "request are not supported"));
    r.prompt_tokens.push_back(TokenId(t.get<int64_t>()));
  }
}

}  // namespace

std::string ApiError::type() const {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

json ApiError::to_json() const {
  json error = {{"message", message}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = param;
  if (!code.empty()) error["code"] = code;
  return {{"error", std::move(error)}};
}

json parse_body(std::string_view body, const RequestLimits& limits) {
  if (json_depth(body, limits.max_json_depth) > limits.max_json_depth)
    bad("", cat("the body nests arrays/objects deeper than ", limits.max_json_depth, " levels"));
  json value = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) bad("", "the body is not valid JSON");
  if (!value.is_object()) bad("", "the body must be a JSON object");
  return value;
}

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view text,
                                           const engine::SamplerParams& defaults, const RequestLimits& limits) {
  const json body = parse_body(text, limits);
  const Fields f(body);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = f.string("model").value_or("");
  if (endpoint == Endpoint::ChatCompletions) r.messages = parse_messages(body, limits);
  else parse_prompt(body, r);

  constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
  r.max_tokens = f.integer("max_completion_tokens", 1, kMaxInt);
  if (!r.max_tokens) r.max_tokens = f.integer("max_tokens", 1, kMaxInt);
  r.n = int32_t(f.integer("n", 1, limits.max_n).value_or(1));
  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    r.include_usage = Fields(*so).boolean("include_usage").value_or(false);
  }
  r.stop = parse_stop(f, limits);
  r.user = f.string("user").value_or("");

  engine::SamplerParams& s = r.sampling;
  s = defaults;
  if (auto v = f.number("temperature", 0, 2)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v == 0) s.top_k = 1, s.top_p = 1;  // nothing but the most likely token
    else s.top_p = float(*v);
  }
  if (auto v = f.integer("top_k", 0, std::numeric_limits<int32_t>::max())) s.top_k = int32_t(*v);
  if (auto v = f.number("min_p", 0, 1)) s.min_p = float(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) s.presence_penalty = float(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
  if (auto v = f.number("repeat_penalty", 0, 10)) {
    if (*v == 0) bad("repeat_penalty", "'repeat_penalty' must be positive (1: off)");
    s.repeat_penalty = float(*v);
  }
  if (const json* seed = f.get("seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : uint64_t(seed->get<int64_t>());
    r.seed_given = true;
  }

  if (endpoint == Endpoint::ChatCompletions) {
    const bool logprobs = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, engine::kMaxTopLogprobs);
    if (top && !logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (logprobs) r.top_logprobs = int32_t(top.value_or(0));
  } else if (auto v = f.integer("logprobs", 0, 5)) {  // legacy completions: the number of alternatives
    r.top_logprobs = int32_t(*v);
  }
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view text, const RequestLimits& limits) {
  const json body = parse_body(text, limits);
  const Fields f(body);
  TokenizeRequest r;
  const auto content = f.string("content");
  if (!content) bad("content", "'content' is required (a string)");
  r.content = *content;
  r.add_special = f.boolean("add_special").value_or(true);
  r.parse_special = f.boolean("parse_special").value_or(false);
  r.with_pieces = f.boolean("with_pieces").value_or(false);
  return r;
}

std::vector<TokenId> parse_detokenize_request(std::string_view text, int64_t vocab_size, const RequestLimits& limits) {
  const json body = parse_body(text, limits);
  const json* tokens = Fields(body).get("tokens");
  if (!tokens || !tokens->is_array()) bad("tokens", "'tokens' is required (an array of token ids)");
  std::vector<TokenId> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size)
      bad("tokens", cat("'tokens[", i, "]' must be a token id in [0, ", vocab_size, ")"));
    ids.push_back(TokenId(t.get<int64_t>()));
  }
  return ids;
}

const char* finish_reason(engine::StopReason reason) {
  switch (reason) {
    case engine::StopReason::MaxTokens:
    case engine::StopReason::ContextFull: return "length";
    default: return "stop";
  }
}

namespace {
json bytes_of(const std::string& piece) {
  json out = json::array();
  for (unsigned char c : piece) out.push_back(int(c));
  return out;
}
}  // namespace

json chat_logprob_entry(const TokenLogprobs& t) {
  json top = json::array();
  for (const auto& [piece, lp] : t.top) top.push_back({{"token", piece}, {"logprob", lp}, {"bytes", bytes_of(piece)}});
  return {{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}, {"top_logprobs", std::move(top)}};
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace greta::server
