// The server's request parsing (src/server/api.h) and response building (responses.h), without HTTP: field types,
// ranges, defaults, null = absent, OpenAI's error object; the chat and completions objects and their streaming chunks,
// usage, logprobs, UTF-8 split across tokens held back. Also replays the fuzzer's corpus (tests/server/corpus/: seeds
// and past crashes) through the fuzz target's own code (tests/fuzz/api_request_input.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "api_request_input.h"
#include "core/error.h"
#include "server/api.h"
#include "server/responses.h"

using namespace greta;
using namespace greta::server;
using engine::RequestEvent;
using nlohmann::json;

namespace {

const RequestLimits kLimits;
const engine::SamplerParams kDefaults;

CompletionRequest chat(const json& body) {
  return parse_completion_request(Endpoint::ChatCompletions, body.dump(), kDefaults, kLimits);
}
CompletionRequest completion(const json& body) {
  return parse_completion_request(Endpoint::Completions, body.dump(), kDefaults, kLimits);
}
json hi() { return json::array({{{"role", "user"}, {"content", "Hi"}}}); }
json with(json body, const char* key, json value) {
  body[key] = std::move(value);
  return body;
}

// The ApiError a call throws (status 0 when it throws none).
template <class F>
ApiError error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError{0, "", "", ""};
}
ApiError chat_error(const json& body) { return error_of([&] { chat(body); }); }
ApiError raw_error(std::string_view text, Endpoint e = Endpoint::ChatCompletions) {
  return error_of([&] { parse_completion_request(e, text, kDefaults, kLimits); });
}

RequestEvent token(int32_t choice, engine::TokenId id, std::string text, float logprob = 0,
                   std::vector<engine::TokenLogprob> top = {}) {
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::Token;
  ev.choice = choice;
  ev.token = id;
  ev.text = std::move(text);
  ev.logprob = logprob;
  ev.top = std::move(top);
  return ev;
}
RequestEvent choice_done(int32_t choice, engine::StopReason why, std::string text = "") {
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::ChoiceDone;
  ev.choice = choice;
  ev.stop = why;
  ev.text = std::move(text);
  return ev;
}
RequestEvent finished(int64_t prompt, int64_t completion, int64_t cached = 0) {
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::Finished;
  ev.usage.prompt_tokens = prompt;
  ev.usage.completion_tokens = completion;
  ev.usage.cached_tokens = cached;
  return ev;
}

std::vector<json> parsed(const std::vector<std::string>& chunks) {
  std::vector<json> out;
  for (const std::string& c : chunks) out.push_back(json::parse(c));
  return out;
}

const model::Tokenizer& tok() { return fuzz::tiny_tokenizer(); }  // ids 9, 10: the bytes C3, A9 ("é")

}  // namespace

TEST_CASE("api: defaults, and null is the same as absent") {
  const CompletionRequest r = chat({{"messages", hi()}});
  CHECK(r.endpoint == Endpoint::ChatCompletions);
  CHECK(r.model.empty());
  REQUIRE(r.messages.size() == 1);
  CHECK(r.messages[0].role == "user");
  CHECK(r.messages[0].content == "Hi");
  CHECK_FALSE(r.max_tokens.has_value());
  CHECK(r.n == 1);
  CHECK_FALSE(r.stream);
  CHECK_FALSE(r.include_usage);
  CHECK(r.stop.empty());
  CHECK(r.top_logprobs == -1);
  CHECK_FALSE(r.seed_given);
  CHECK(r.sampling.temperature == kDefaults.temperature);
  CHECK(r.sampling.top_k == kDefaults.top_k);
  CHECK(r.sampling.top_p == kDefaults.top_p);
  CHECK(r.sampling.min_p == kDefaults.min_p);
  CHECK(r.sampling.seed == kDefaults.seed);

  json nulls = {{"messages", hi()}};
  for (const char* k : {"model", "max_tokens", "max_completion_tokens", "n", "stream", "stream_options", "stop", "user",
                        "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                        "repeat_penalty", "seed", "logprobs", "top_logprobs"})
    nulls[k] = nullptr;
  const CompletionRequest n = chat(nulls);
  CHECK_FALSE(n.max_tokens.has_value());
  CHECK(n.n == 1);
  CHECK(n.top_logprobs == -1);
  CHECK_FALSE(n.seed_given);
  CHECK(n.sampling.temperature == kDefaults.temperature);
  CHECK(chat({{"messages", hi()}, {"stream_options", {{"include_usage", nullptr}}}, {"stream", true}}).include_usage == false);
  // Unknown fields are ignored, as OpenAI's API does.
  CHECK(chat({{"messages", hi()}, {"frobnicate", {1, 2, 3}}, {"logit_bias", json::object()}}).n == 1);
  // A message's content: null is "missing".
  CHECK(chat_error({{"messages", {{{"role", "user"}, {"content", nullptr}}}}}).param == "messages[0].content");
}

TEST_CASE("api: fields are read with their types") {
  const CompletionRequest r = chat({{"messages", hi()}, {"model", "m"}, {"max_tokens", 7}, {"n", 3}, {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}, {"stop", {"a", "", "bc"}},
                                    {"temperature", 0.5}, {"top_p", 0.5}, {"top_k", 7}, {"min_p", 0.25},
                                    {"presence_penalty", -1.5}, {"frequency_penalty", 2}, {"repeat_penalty", 1.1},
                                    {"seed", 42}, {"logprobs", true}, {"top_logprobs", 20}, {"user", "u"}});
  CHECK(r.model == "m");
  CHECK(r.max_tokens == 7);
  CHECK(r.n == 3);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.stop == std::vector<std::string>{"a", "bc"});  // empty stop strings are dropped
  CHECK(r.sampling.temperature == 0.5f);
  CHECK(r.sampling.top_p == 0.5f);
  CHECK(r.sampling.top_k == 7);
  CHECK(r.sampling.min_p == 0.25f);
  CHECK(r.sampling.presence_penalty == -1.5f);
  CHECK(r.sampling.frequency_penalty == 2.f);
  CHECK(r.sampling.repeat_penalty == doctest::Approx(1.1));
  CHECK(r.seed_given);
  CHECK(r.sampling.seed == 42);
  CHECK(r.top_logprobs == 20);
  CHECK(r.user == "u");
  // max_completion_tokens (the newer name) wins over max_tokens.
  CHECK(chat({{"messages", hi()}, {"max_tokens", 9}, {"max_completion_tokens", 4}}).max_tokens == 4);
  // top_p 0: nothing but the most likely token.
  const CompletionRequest g = chat({{"messages", hi()}, {"top_p", 0}});
  CHECK(g.sampling.top_k == 1);
  CHECK(g.sampling.top_p == 1.f);
  // Seeds: any 64-bit pattern; negative ones wrap.
  CHECK(chat({{"messages", hi()}, {"seed", -1}}).sampling.seed == std::numeric_limits<uint64_t>::max());
  CHECK(parse_completion_request(Endpoint::ChatCompletions,
                                 R"({"messages":[{"role":"user","content":"Hi"}],"seed":18446744073709551615})",
                                 kDefaults, kLimits).sampling.seed == std::numeric_limits<uint64_t>::max());
  // logprobs without top_logprobs: the sampled token's only.
  CHECK(chat({{"messages", hi()}, {"logprobs", true}}).top_logprobs == 0);
  CHECK(chat({{"messages", hi()}, {"logprobs", false}}).top_logprobs == -1);
  // Completions: logprobs is the number of alternatives (0..5).
  CHECK(completion({{"prompt", "x"}, {"logprobs", 0}}).top_logprobs == 0);
  CHECK(completion({{"prompt", "x"}, {"logprobs", 5}}).top_logprobs == 5);
}

TEST_CASE("api: wrong types are refused naming the field") {
  const json base = {{"messages", hi()}};
  struct Case {
    const char* field;
    json value;
  };
  for (const Case& c : std::vector<Case>{{"temperature", "hot"}, {"temperature", true}, {"max_tokens", 1.5},
                                         {"max_tokens", "5"}, {"n", "2"}, {"n", 2.0}, {"stop", 5},
                                         {"stop", {{"a", 1}}}, {"stop", json::array({"a", 5})}, {"stream", "yes"},
                                         {"stream", 1}, {"stream_options", 1}, {"seed", 1.5}, {"seed", "1"},
                                         {"top_k", 1.5}, {"logprobs", 1}, {"top_logprobs", "3"}, {"user", 5},
                                         {"model", 5}, {"messages", "Hi"}, {"messages", {{"role", "user"}}}}) {
    CAPTURE(c.field);
    CAPTURE(c.value.dump());
    const ApiError e = chat_error(with(base, c.field, c.value));
    CHECK(e.status == 400);
    CHECK(e.param == c.field);
    CHECK(e.type() == "invalid_request_error");
    CHECK_FALSE(e.message.empty());
  }
  CHECK(chat_error({{"messages", hi()}, {"stream_options", {{"include_usage", "yes"}}}}).param == "include_usage");
}

TEST_CASE("api: values out of range are refused") {
  const json base = {{"messages", hi()}};
  struct Case {
    const char* field;
    json value;
    bool ok;
  };
  const std::vector<Case> cases = {
      {"temperature", 0, true},   {"temperature", 2, true},       {"temperature", 2.001, false},
      {"temperature", 3, false},  {"temperature", -0.1, false},   {"top_p", 1, true},
      {"top_p", 2, false},        {"top_p", -1, false},           {"min_p", 1.5, false},
      {"n", 0, false},            {"n", 1, true},                 {"n", 16, true},
      {"n", 17, false},           {"n", -1, false},               {"max_tokens", 0, false},
      {"max_tokens", 1, true},    {"max_tokens", -5, false},      {"max_completion_tokens", 0, false},
      {"presence_penalty", 2.5, false}, {"frequency_penalty", -3, false}, {"repeat_penalty", 0, false},
      {"repeat_penalty", 11, false}, {"repeat_penalty", 10, true}, {"top_k", -1, false},
      {"top_k", 0, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.field);
    CAPTURE(c.value.dump());
    const ApiError e = chat_error(with(base, c.field, c.value));
    if (c.ok) {
      CHECK(e.status == 0);
    } else {
      CHECK(e.status == 400);
      CHECK(e.param == c.field);
    }
  }
  // top_logprobs: 0..20, and only with logprobs.
  CHECK(chat_error({{"messages", hi()}, {"logprobs", true}, {"top_logprobs", 21}}).param == "top_logprobs");
  CHECK(chat_error({{"messages", hi()}, {"logprobs", true}, {"top_logprobs", 50}}).param == "top_logprobs");
  CHECK(chat_error({{"messages", hi()}, {"logprobs", true}, {"top_logprobs", -1}}).param == "top_logprobs");
  CHECK(chat_error({{"messages", hi()}, {"top_logprobs", 2}}).param == "top_logprobs");
  CHECK(error_of([] { completion({{"prompt", "x"}, {"logprobs", 6}}); }).param == "logprobs");
  // Huge numbers: a float where an integer is wanted, beyond int64, beyond double.
  CHECK(raw_error(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1e30})").param == "max_tokens");
  CHECK(raw_error(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":18446744073709551615})").param ==
        "max_tokens");
  CHECK(raw_error(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":100000000000000000000})").param ==
        "max_tokens");
  CHECK(raw_error(R"({"messages":[{"role":"user","content":"Hi"}],"seed":1e400})").status == 400);
  CHECK(raw_error(R"({"messages":[{"role":"user","content":"Hi"}],"temperature":1e400})").status == 400);
  // The largest int64 max_tokens is accepted (the server clamps it to the context).
  CHECK(parse_completion_request(Endpoint::ChatCompletions,
                                 R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":9223372036854775807})",
                                 kDefaults, kLimits).max_tokens == std::numeric_limits<int64_t>::max());
}

TEST_CASE("api: messages") {
  CHECK(chat_error({{"model", "m"}}).param == "messages");
  CHECK(chat_error({{"messages", json::array()}}).param == "messages");
  CHECK(chat_error({{"messages", {"Hi"}}}).param == "messages[0]");
  CHECK(chat_error({{"messages", {{{"content", "Hi"}}}}}).param == "messages[0].role");
  CHECK(chat_error({{"messages", {{{"role", "wizard"}, {"content", "Hi"}}}}}).param == "messages[0].role");
  CHECK(chat_error({{"messages", {{{"role", "tool"}, {"content", "Hi"}}}}}).param == "messages[0].role");
  CHECK(chat_error({{"messages", {{{"role", "user"}}}}}).param == "messages[0].content");
  CHECK(chat_error({{"messages", {{{"role", "user"}, {"content", 5}}}}}).param == "messages[0].content");
  CHECK(chat_error({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}).param ==
        "messages[0].content[0].type");
  CHECK(chat_error({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}}).param ==
        "messages[0].content[0].text");
  CHECK(chat_error({{"messages", {{{"role", "user"}, {"content", {"just a string"}}}}}}).param ==
        "messages[0].content[0]");
  CHECK(chat_error({{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello"}}}}})
            .param == "messages");
  json many = json::array();
  for (size_t i = 0; i <= kLimits.max_messages; ++i) many.push_back({{"role", "user"}, {"content", "x"}});
  CHECK(chat_error({{"messages", many}}).param == "messages");

  const CompletionRequest r = chat(
      {{"messages",
        {{{"role", "developer"}, {"content", {{{"type", "text"}, {"text", "Be "}}, {{"type", "text"}, {"text", "kind."}}}}},
         {{"role", "assistant"}, {"content", ""}},
         {{"role", "user"}, {"content", "Hi"}}}}});
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].role == "system");  // developer is OpenAI's newer name for system
  CHECK(r.messages[0].content == "Be kind.");
  CHECK(r.messages[1].role == "assistant");
  CHECK(r.messages[1].content.empty());
}

TEST_CASE("api: stop strings") {
  CHECK(chat({{"messages", hi()}, {"stop", "END"}}).stop == std::vector<std::string>{"END"});
  CHECK(chat({{"messages", hi()}, {"stop", ""}}).stop.empty());
  json many = json::array();
  for (int i = 0; i <= kLimits.max_stop; ++i) many.push_back(cat("s", i));
  CHECK(chat_error({{"messages", hi()}, {"stop", many}}).param == "stop");
  CHECK(chat_error({{"messages", hi()}, {"stop", std::string(kLimits.max_stop_bytes + 1, 'x')}}).param == "stop");
  CHECK(chat({{"messages", hi()}, {"stop", std::string(kLimits.max_stop_bytes, 'x')}}).stop.size() == 1);
}

TEST_CASE("api: completions' prompt") {
  CHECK(completion({{"prompt", "Once"}}).prompt == "Once");
  CHECK(completion({{"prompt", {"Once"}}}).prompt == "Once");
  const CompletionRequest ids = completion({{"prompt", {1, 2, 3}}});
  CHECK(ids.prompt.empty());
  CHECK(ids.prompt_tokens == std::vector<engine::TokenId>{1, 2, 3});
  CHECK(completion({{"prompt", "x"}}).endpoint == Endpoint::Completions);
  for (const json& bad : {json(nullptr), json(""), json(5), json::array(), json({"a", "b"}), json({1, -2}),
                          json({1, 2.5}), json({json::array({1, 2})}), json({1, 4294967296LL})}) {
    CAPTURE(bad.dump());
    CHECK(error_of([&] { completion({{"prompt", bad}}); }).param == "prompt");
  }
  CHECK(error_of([] { completion({{"max_tokens", 4}}); }).param == "prompt");
  // The chat fields are not read by completions, and completions' logprobs is an integer.
  CHECK(completion({{"prompt", "x"}, {"messages", 5}}).messages.empty());
  CHECK(error_of([] { completion({{"prompt", "x"}, {"logprobs", true}}); }).param == "logprobs");
}

TEST_CASE("api: the body: JSON, an object, bounded nesting") {
  for (const char* text : {"", "{", "[1,2]", "\"Hi\"", "null", "42", "{\"messages\": [}", "{\"a\":1,}",
                           "{\"prompt\": \"\\ud800\"}", "{\"prompt\": \"\xff\"}"}) {
    CAPTURE(text);
    const ApiError e = raw_error(text, Endpoint::Completions);
    CHECK(e.status == 400);
    CHECK(e.param.empty());
  }
  const auto nested = [](int depth) {
    return "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"x\":" + std::string(size_t(depth - 1), '[') +
           std::string(size_t(depth - 1), ']') + "}";
  };
  CHECK(raw_error(nested(kLimits.max_json_depth)).status == 0);
  CHECK(raw_error(nested(kLimits.max_json_depth + 1)).status == 400);
  CHECK(raw_error(nested(100000)).status == 400);
  // Brackets inside strings are text, not nesting.
  const std::string in_string = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(1000, '[') + "\"}]}";
  CHECK(raw_error(in_string).status == 0);
  CHECK(parse_body(R"({"a": "\"[[["})", kLimits).is_object());
}

TEST_CASE("api: tokenize and detokenize requests") {
  const TokenizeRequest t = parse_tokenize_request(R"({"content": "Hi"})", kLimits);
  CHECK(t.content == "Hi");
  CHECK(t.add_special);
  CHECK_FALSE(t.parse_special);
  CHECK_FALSE(t.with_pieces);
  const TokenizeRequest u = parse_tokenize_request(
      R"({"content": "", "add_special": false, "parse_special": true, "with_pieces": true})", kLimits);
  CHECK(u.content.empty());
  CHECK_FALSE(u.add_special);
  CHECK(u.parse_special);
  CHECK(u.with_pieces);
  CHECK(parse_tokenize_request(R"({"content": "Hi", "add_special": null})", kLimits).add_special);
  CHECK(error_of([] { parse_tokenize_request(R"({"text": "Hi"})", kLimits); }).param == "content");
  CHECK(error_of([] { parse_tokenize_request(R"({"content": 5})", kLimits); }).param == "content");
  CHECK(error_of([] { parse_tokenize_request(R"({"content": "x", "with_pieces": 1})", kLimits); }).param ==
        "with_pieces");

  CHECK(parse_detokenize_request(R"({"tokens": [0, 5, 11]})", 12, kLimits) == std::vector<engine::TokenId>{0, 5, 11});
  CHECK(parse_detokenize_request(R"({"tokens": []})", 12, kLimits).empty());
  for (const char* bad : {R"({"tokens": [12]})", R"({"tokens": [-1]})", R"({"tokens": [1.5]})", R"({"tokens": "1"})",
                          R"({"tokens": null})", R"({})", R"({"tokens": [18446744073709551615]})"}) {
    CAPTURE(bad);
    CHECK(error_of([&] { parse_detokenize_request(bad, 12, kLimits); }).param == "tokens");
  }
}

TEST_CASE("api: OpenAI's error object") {
  const json j = ApiError{404, "no such model", "model", "model_not_found"}.to_json();
  CHECK(j == json{{"error", {{"message", "no such model"}, {"type", "not_found_error"}, {"param", "model"},
                             {"code", "model_not_found"}}}});
  const json k = ApiError{400, "bad", "", ""}.to_json();
  CHECK(k["error"]["param"].is_null());
  CHECK(k["error"]["code"].is_null());
  CHECK(k["error"]["type"] == "invalid_request_error");
  CHECK(ApiError{401, "", "", ""}.type() == "authentication_error");
  CHECK(ApiError{413, "", "", ""}.type() == "invalid_request_error");
  CHECK(ApiError{429, "", "", ""}.type() == "rate_limit_error");
  CHECK(ApiError{500, "", "", ""}.type() == "server_error");
  CHECK(ApiError{503, "", "", ""}.type() == "service_unavailable");
  CHECK(std::string(finish_reason(engine::StopReason::MaxTokens)) == "length");
  CHECK(std::string(finish_reason(engine::StopReason::ContextFull)) == "length");
  CHECK(std::string(finish_reason(engine::StopReason::EndOfGeneration)) == "stop");
  CHECK(std::string(finish_reason(engine::StopReason::StopString)) == "stop");
  // Invalid UTF-8 in a string becomes U+FFFD instead of failing.
  CHECK(dump(json("a\xff" "b")) == "\"a\xef\xbf\xbd" "b\"");
}

TEST_CASE("responses: a chat completion, not streamed") {
  const CompletionRequest r = chat({{"messages", hi()}});
  CompletionResponse resp(r, "chatcmpl-1", "stories", 1700000000, tok());
  CHECK(resp.opening_chunks().size() == 1);  // asked for, but only sent when streaming
  std::vector<std::string> chunks;
  resp.on_event(token(0, 4, "a"), chunks);
  resp.on_event(token(0, 5, "b"), chunks);
  resp.on_event(choice_done(0, engine::StopReason::StopString, ""), chunks);
  CHECK_FALSE(resp.finished());
  resp.on_event(finished(5, 2, 3), chunks);
  CHECK(chunks.empty());
  CHECK(resp.finished());
  CHECK_FALSE(resp.failed());
  CHECK(resp.finish_reason() == "stop");
  const json j = resp.final_json();
  CHECK(j["id"] == "chatcmpl-1");
  CHECK(j["object"] == "chat.completion");
  CHECK(j["created"] == 1700000000);
  CHECK(j["model"] == "stories");
  REQUIRE(j["choices"].size() == 1);
  CHECK(j["choices"][0] == json{{"index", 0}, {"finish_reason", "stop"}, {"logprobs", nullptr},
                                {"message", {{"role", "assistant"}, {"content", "ab"}}}});
  CHECK(j["usage"] == json{{"prompt_tokens", 5}, {"completion_tokens", 2}, {"total_tokens", 7},
                           {"prompt_tokens_details", {{"cached_tokens", 3}}}});
}

TEST_CASE("responses: a streamed chat completion: role, deltas, finish, usage") {
  const CompletionRequest r = chat({{"messages", hi()}, {"stream", true}, {"stream_options", {{"include_usage", true}}},
                                    {"n", 2}});
  CompletionResponse resp(r, "chatcmpl-2", "stories", 1, tok());
  std::vector<json> opening = parsed(resp.opening_chunks());
  REQUIRE(opening.size() == 2);  // one role chunk per choice
  for (int i = 0; i < 2; ++i) {
    CHECK(opening[size_t(i)]["object"] == "chat.completion.chunk");
    CHECK(opening[size_t(i)]["choices"][0]["index"] == i);
    CHECK(opening[size_t(i)]["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
    CHECK(opening[size_t(i)]["usage"].is_null());  // with include_usage every chunk carries "usage": null
  }
  std::vector<std::string> chunks;
  resp.on_event(token(0, 4, "a"), chunks);
  resp.on_event(token(1, 5, "b"), chunks);
  resp.on_event(choice_done(1, engine::StopReason::MaxTokens, "c"), chunks);  // text held until the end: released
  resp.on_event(choice_done(0, engine::StopReason::EndOfGeneration), chunks);
  resp.on_event(finished(3, 3), chunks);
  const std::vector<json> c = parsed(chunks);
  REQUIRE(c.size() == 6);
  CHECK(c[0]["choices"][0]["delta"] == json{{"content", "a"}});
  CHECK(c[0]["choices"][0]["finish_reason"].is_null());
  CHECK(c[1]["choices"][0]["index"] == 1);
  CHECK(c[2]["choices"][0]["delta"] == json{{"content", "c"}});
  CHECK(c[3]["choices"][0] == json{{"index", 1}, {"delta", json::object()}, {"logprobs", nullptr},
                                   {"finish_reason", "length"}});
  CHECK(c[4]["choices"][0]["finish_reason"] == "stop");
  CHECK(c[5]["choices"] == json::array());
  CHECK(c[5]["usage"]["completion_tokens"] == 3);
  CHECK(c[5]["usage"]["total_tokens"] == 6);
  for (const json& x : c) {
    CHECK(x["id"] == "chatcmpl-2");
    CHECK(x.contains("usage"));
  }
  const json j = resp.final_json();
  CHECK(j["choices"][0]["message"]["content"] == "a");
  CHECK(j["choices"][1]["message"]["content"] == "bc");

  // Without include_usage: no usage chunk and no "usage" key.
  CompletionResponse plain(chat({{"messages", hi()}, {"stream", true}}), "x", "m", 1, tok());
  std::vector<std::string> more;
  plain.on_event(token(0, 4, "a"), more);
  plain.on_event(choice_done(0, engine::StopReason::MaxTokens), more);
  plain.on_event(finished(1, 1), more);
  REQUIRE(more.size() == 2);
  for (const json& x : parsed(more)) CHECK_FALSE(x.contains("usage"));
}

TEST_CASE("responses: completions, streamed and not") {
  const CompletionRequest r = completion({{"prompt", "x"}, {"stream", true}});
  CompletionResponse resp(r, "cmpl-1", "m", 1, tok());
  CHECK(resp.opening_chunks().empty());  // no role chunk for completions
  std::vector<std::string> chunks;
  resp.on_event(token(0, 4, "a"), chunks);
  resp.on_event(token(0, 5, ""), chunks);  // a token that releases no text (held by a stop string): no chunk
  resp.on_event(choice_done(0, engine::StopReason::StopString), chunks);
  resp.on_event(finished(1, 2), chunks);
  const std::vector<json> c = parsed(chunks);
  REQUIRE(c.size() == 2);
  CHECK(c[0]["object"] == "text_completion");
  CHECK(c[0]["choices"][0]["text"] == "a");
  CHECK(c[1]["choices"][0]["text"] == "");
  CHECK(c[1]["choices"][0]["finish_reason"] == "stop");
  const json j = resp.final_json();
  CHECK(j["object"] == "text_completion");
  CHECK(j["choices"][0]["text"] == "a");
  CHECK(j["choices"][0]["logprobs"].is_null());
  CHECK(j["usage"]["completion_tokens"] == 2);
}

TEST_CASE("responses: logprobs' shapes") {
  // Chat: content entries with the token, its logprob, its bytes and the alternatives.
  const CompletionRequest r = chat({{"messages", hi()}, {"stream", true}, {"logprobs", true}, {"top_logprobs", 2}});
  CompletionResponse resp(r, "c", "m", 1, tok());
  std::vector<std::string> chunks;
  resp.on_event(token(0, 4, "a", -0.25f, {{4, -0.25f}, {5, -2.f}}), chunks);
  resp.on_event(token(0, 9, "", -0.5f, {{9, -0.5f}, {4, -1.f}}), chunks);  // the byte C3: no text yet, logprobs still
  resp.on_event(token(0, 10, "\xc3\xa9", -0.125f, {{10, -0.125f}, {6, -3.f}}), chunks);
  resp.on_event(choice_done(0, engine::StopReason::MaxTokens), chunks);
  resp.on_event(finished(1, 3), chunks);
  const std::vector<json> c = parsed(chunks);
  REQUIRE(c.size() == 4);
  const json& e0 = c[0]["choices"][0]["logprobs"]["content"][0];
  CHECK(e0 == json{{"token", "a"}, {"logprob", -0.25}, {"bytes", {97}},
                   {"top_logprobs", {{{"token", "a"}, {"logprob", -0.25}, {"bytes", {97}}},
                                     {{"token", "b"}, {"logprob", -2.0}, {"bytes", {98}}}}}});
  CHECK(c[1]["choices"][0]["delta"] == json::object());  // nothing to show yet
  CHECK(c[1]["choices"][0]["logprobs"]["content"][0]["bytes"] == json{0xc3});
  CHECK(c[1]["choices"][0]["logprobs"]["content"][0]["token"] == "\xef\xbf\xbd");  // a lone byte: U+FFFD in JSON text
  CHECK(c[2]["choices"][0]["delta"]["content"] == "\xc3\xa9");
  const json j = resp.final_json();
  REQUIRE(j["choices"][0]["logprobs"]["content"].size() == 3);
  CHECK(j["choices"][0]["logprobs"]["content"][2]["bytes"] == json{0xa9});

  // Completions: tokens, token_logprobs, top_logprobs (piece → logprob), text_offset.
  CompletionResponse legacy(completion({{"prompt", "x"}, {"logprobs", 1}}), "c", "m", 1, tok());
  legacy.on_event(token(0, 4, "a", -0.25f, {{4, -0.25f}}), chunks);
  legacy.on_event(token(0, 5, "b", -0.5f, {{5, -0.5f}}), chunks);
  legacy.on_event(choice_done(0, engine::StopReason::MaxTokens), chunks);
  legacy.on_event(finished(1, 2), chunks);
  const json l = legacy.final_json()["choices"][0]["logprobs"];
  CHECK(l == json{{"tokens", {"a", "b"}}, {"token_logprobs", {-0.25, -0.5}},
                  {"top_logprobs", {{{"a", -0.25}}, {{"b", -0.5}}}}, {"text_offset", {0, 1}}});
}

TEST_CASE("responses: UTF-8 split across tokens is held back until complete") {
  const CompletionRequest r = completion({{"prompt", "x"}, {"stream", true}});
  CompletionResponse resp(r, "c", "m", 1, tok());
  std::vector<std::string> chunks;
  resp.on_event(token(0, 0, "\xe2"), chunks);  // "€" = E2 82 AC, one byte per token
  resp.on_event(token(0, 0, "\x82"), chunks);
  CHECK(chunks.empty());
  resp.on_event(token(0, 0, "\xac!"), chunks);
  REQUIRE(chunks.size() == 1);
  CHECK(json::parse(chunks[0])["choices"][0]["text"] == "\xe2\x82\xac!");
  // A character never completed: U+FFFD at the end, and the stream stays valid UTF-8.
  resp.on_event(token(0, 0, "\xf0\x9f"), chunks);
  resp.on_event(choice_done(0, engine::StopReason::MaxTokens), chunks);
  resp.on_event(finished(1, 4), chunks);
  REQUIRE(chunks.size() == 3);
  CHECK(json::parse(chunks[1])["choices"][0]["text"] == "\xef\xbf\xbd");
  CHECK(resp.final_json()["choices"][0]["text"] == "\xe2\x82\xac!\xef\xbf\xbd");
}

TEST_CASE("responses: a failed request") {
  CompletionResponse resp(chat({{"messages", hi()}, {"stream", true}}), "c", "m", 1, tok());
  std::vector<std::string> chunks;
  RequestEvent failed;
  failed.kind = RequestEvent::Kind::Failed;
  failed.error = "the server is shutting down";
  resp.on_event(failed, chunks);
  CHECK(resp.failed());
  CHECK_FALSE(resp.finished());
  CHECK(resp.error() == "the server is shutting down");
  REQUIRE(chunks.size() == 1);
  CHECK(json::parse(chunks[0]) == ApiError{500, "the server is shutting down", "", ""}.to_json());
}

TEST_CASE("api: the fuzzer's corpus parses or is refused, never crashes") {
  const std::filesystem::path dir = std::filesystem::path(GRETA_SOURCE_DIR) / "tests/server/corpus";
  REQUIRE(std::filesystem::is_directory(dir));
  int files = 0, accepted = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CAPTURE(entry.path().filename().string());
    bool ok = false;
    CHECK_NOTHROW(ok = fuzz::run_input(input));  // anything but ApiError escaping is a failure
    accepted += ok;
    ++files;
  }
  CHECK(files >= 10);
  CHECK(accepted >= 5);  // the seeds that are valid requests still parse
}
