// One input of the server's request fuzzer (api_request_fuzz.cpp), shared with its replay in greta_server_tests
// (tests/server/api_test.cpp, over tests/server/corpus/): the first byte chooses the parser ('C' chat, 'P' completions,
// 'T' /tokenize, 'D' /detokenize; any other byte by its value mod 4), the rest is the body. It must parse or throw
// ApiError; a completion request that parses gets a CompletionResponse fed token events made of the body's bytes
// (invalid UTF-8 included), streamed and not, and every chunk and the final object are serialised.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"
#include "server/api.h"
#include "server/responses.h"

namespace greta::server::fuzz {

// The SentencePiece vocabulary of tokenizer_test's tiny_spm: 12 tokens, two of them bytes (<0xC3> <0xA9>).
inline const model::Tokenizer& tiny_tokenizer() {
  static const model::Tokenizer t = [] {
    model::TokenizerVocab v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "c", "ab", "bc", "<0xC3>", "<0xA9>", "\xe2\x96\x81" "a"};
    v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 1};
    return model::Tokenizer::from_vocab(v);
  }();
  return t;
}

// Feeds a parsed request's response token events made of `bytes`, as the scheduler would send them.
inline void respond(const CompletionRequest& request, std::string_view bytes) {
  CompletionResponse response(request, "cmpl-fuzz", "fuzz", 0, tiny_tokenizer());
  std::vector<std::string> chunks = response.opening_chunks();
  size_t pos = 0;
  for (int32_t choice = 0; choice < request.n; ++choice) {
    for (int i = 0; i < 4 && pos < bytes.size(); ++i) {
      engine::RequestEvent ev;
      ev.kind = engine::RequestEvent::Kind::Token;
      ev.choice = choice;
      ev.token = engine::TokenId(uint8_t(bytes[pos]) % 12);
      const size_t take = std::min<size_t>(1 + uint8_t(bytes[pos]) % 5, bytes.size() - pos);
      ev.text = std::string(bytes.substr(pos, take));
      pos += take;
      ev.logprob = -0.5f;
      if (request.top_logprobs > 0) ev.top.push_back({ev.token, -0.5f});
      response.on_event(ev, chunks);
    }
    engine::RequestEvent done;
    done.kind = engine::RequestEvent::Kind::ChoiceDone;
    done.choice = choice;
    done.text = std::string(bytes.substr(pos, pos < bytes.size() ? 2 : 0));
    done.stop = engine::StopReason::StopString;
    response.on_event(done, chunks);
  }
  engine::RequestEvent finished;
  finished.kind = engine::RequestEvent::Kind::Finished;
  finished.usage.completion_tokens = int64_t(pos);
  response.on_event(finished, chunks);
  volatile size_t sink = dump(response.final_json()).size();
  for (const std::string& c : chunks) sink = sink + c.size();
}

// Runs one input; returns true when it parsed, false when it was refused with ApiError (anything else propagates).
inline bool run_input(std::string_view input) {
  if (input.empty()) return false;
  const char selector = input[0];
  const std::string_view body = input.substr(1);
  const RequestLimits limits;
  const int which = selector == 'C' ? 0 : selector == 'P' ? 1 : selector == 'T' ? 2 : selector == 'D' ? 3
                                                                                  : uint8_t(selector) % 4;
  try {
    switch (which) {
      case 0:
      case 1: {
        const CompletionRequest r = parse_completion_request(
            which == 0 ? Endpoint::ChatCompletions : Endpoint::Completions, body, engine::SamplerParams{}, limits);
        respond(r, body.substr(body.size() / 2));  // bytes from the body's end: they vary with the input
        break;
      }
      case 2: {
        const TokenizeRequest t = parse_tokenize_request(body, limits);
        (void)tiny_tokenizer().encode(t.content, t.add_special, t.parse_special);
        break;
      }
      default: {
        const auto ids = parse_detokenize_request(body, 12, limits);
        (void)tiny_tokenizer().decode(ids);
        break;
      }
    }
    return true;
  } catch (const ApiError& e) {
    volatile size_t sink = dump(e.to_json()).size();
    (void)sink;
    return false;
  }
}

}  // namespace greta::server::fuzz
