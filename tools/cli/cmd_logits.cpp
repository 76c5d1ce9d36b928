// greta-vk logits MODEL -p PROMPT --out FILE: the logits after every prompt token (teacher forcing), written as
// little-endian float32, n_prompt rows of n_vocab -- the layout of ../shared/golden/*.prompt_logits.f32, so outputs
// of any backend can be compared with llama.cpp's (row i = the logits after consuming tokens 0..i).
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "args.h"
#include "backend_factory.h"
#include "commands.h"
#include "core/error.h"
#include "generation.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_logits_options[] = {
    {"prompt", "p", true, "the prompt text"},
    {"file", "f", true, "read the prompt from a file"},
    {"tokens", nullptr, true, "token ids instead of a prompt: \"1 2 3\" (space or comma separated)"},
    {"out", "o", true, "the output file (little-endian float32, n_prompt x n_vocab)"},
    {"ctx", "c", true, "context size (default: the prompt's length)"},
    {"no-bos", nullptr, false, "do not add the BOS token the model would add"},
    {"no-parse-special", nullptr, false, "treat special-token text in the prompt as plain text"},
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk logits MODEL (-p PROMPT | -f FILE | --tokens \"ID ...\") --out FILE [--no-bos] [--backend cpu|vk|hip] "
    "[--device N] [--threads N]";

// Writes the floats little-endian whatever the host's byte order; the file is written as FILE.part and renamed, so
// a failure leaves no truncated output behind.
void write_f32_file(const std::string& path, const std::vector<float>& values) {
  const std::string part = path + ".part";
  std::FILE* f = std::fopen(part.c_str(), "wb");
  if (!f) fail("--out ", path, ": cannot create the file (", std::strerror(errno), ")");
  bool ok = true;
  if constexpr (std::endian::native == std::endian::little) {
    ok = std::fwrite(values.data(), sizeof(float), values.size(), f) == values.size();
  } else {
    for (size_t i = 0; ok && i < values.size(); ++i) {
      const uint32_t v = std::bit_cast<uint32_t>(values[i]);
      const unsigned char bytes[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
      ok = std::fwrite(bytes, 1, 4, f) == 4;
    }
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(part.c_str(), path.c_str()) != 0) {
    std::remove(part.c_str());
    fail("--out ", path, ": write failed (", std::strerror(errno), ")");
  }
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  const auto specs = join_options({k_logits_options, kv_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\nWrites the logits after every prompt token as little-endian float32 [n_prompt, n_vocab].\n\n%s",
                k_usage, usage_options(specs).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  if (!args.has("out")) fail("no output file: give one with --out FILE");
  const std::string out_path = args.get("out");
  if (out_path.empty()) fail("--out needs a file name");
  const bool given_tokens = args.has("tokens");
  if (given_tokens && (args.has("prompt") || args.has("file"))) fail("give either a prompt or --tokens, not both");
  const std::string prompt_text = given_tokens ? std::string() : read_prompt(args);
  std::vector<model::TokenId> tokens = given_tokens ? parse_token_list(args.get("tokens")) : std::vector<model::TokenId>{};
  const int64_t ctx_option = args.get_int("ctx", 0);
  if (ctx_option < 0) fail("--ctx ", ctx_option, ": must be positive");
  const BackendRequest backend = backend_request_from(args);

  ModelFiles files = read_model(args.positional()[0]);
  if (!given_tokens) {
    tokens = files.tokenizer.encode(prompt_text, /*add_special=*/true, /*parse_special=*/!args.has("no-parse-special"));
    if (args.has("no-bos") && files.tokenizer.add_bos() && !tokens.empty() && tokens.front() == files.tokenizer.bos())
      tokens.erase(tokens.begin());
    if (tokens.empty()) fail("the prompt is empty (and the model adds no BOS token)");
  }
  for (model::TokenId t : tokens)
    if (t >= files.config.vocab_size)
      fail("--tokens: token id ", t, " is outside the vocabulary (", files.config.vocab_size, " tokens)");
  const int64_t n = int64_t(tokens.size());
  // The context only needs to hold the prompt; a larger --ctx is allowed, a smaller one is the user's error.
  const int64_t ctx = ctx_option > 0 ? ctx_option : n;
  if (n > ctx) fail("the prompt has ", n, " tokens, more than the context of ", ctx, " (use a larger --ctx)");

  LoadedModel loaded = load_model(std::move(files), backend, engine::EngineOptions{.ctx = ctx, .kv_type = kv_type_from(args)});
  const std::vector<float> logits = loaded.engine.prefill_all_logits(tokens);
  write_f32_file(out_path, logits);
  const engine::Timings& t = loaded.engine.timings();
  std::fprintf(stderr, "wrote %lld x %lld logits to %s (prefill %s tokens/s, load %.0f ms)\n",
               static_cast<long long>(n), static_cast<long long>(loaded.engine.vocab_size()), out_path.c_str(),
               format_rate(t.prefill_tokens_per_s()).c_str(), t.load_s * 1e3);
  return 0;
}

}  // namespace greta::cli
