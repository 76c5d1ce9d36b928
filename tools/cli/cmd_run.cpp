// greta-vk run MODEL -p PROMPT: generates a continuation, streamed to stdout as it is produced (or one JSON object
// with --json), with a summary on stderr.
#include <cstdio>
#include <string>

#include "args.h"
#include "backend_factory.h"
#include "commands.h"
#include "core/error.h"
#include "generation.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_run_options[] = {
    {"prompt", "p", true, "the prompt text"},
    {"file", "f", true, "read the prompt from a file"},
    {"n-predict", "n", true, "tokens to generate at most (default 128; -1: until end of text or a full context)"},
    {"ctx", "c", true, "context size in tokens (default: the model's, capped by memory)"},
    {"no-bos", nullptr, false, "do not add the BOS token the model would add"},
    {"no-parse-special", nullptr, false, "treat special-token text like <|im_start|> in the prompt as plain text"},
    {"json", nullptr, false, "print one JSON object (prompt_tokens, tokens, text, stop, timings) instead of text"},
    TraceRequest::option,
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk run MODEL (-p PROMPT | -f FILE) [-n N] [--ctx C] [sampling options] [--backend cpu|vk|hip] "
    "[--device N] [--threads N] [--no-bos] [--json] [--trace FILE]";

constexpr int64_t kDefaultPredict = 128;

std::string id_list(const std::vector<model::TokenId>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += cat(i ? "," : "", ids[i]);
  return out;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const auto specs = join_options({k_run_options, sampling_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\nGenerates text from a prompt, streaming it to stdout; a summary goes to stderr.\n\n%s",
                k_usage, usage_options(specs).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  // Everything the user typed is checked before the (possibly slow) model load.
  const std::string prompt_text = read_prompt(args);
  const engine::SamplerParams sampling = sampling_params_from(args);
  const bool explicit_n = args.has("n-predict");
  const int64_t n_predict = args.get_int("n-predict", kDefaultPredict);
  if (n_predict < -1) fail("-n ", n_predict, ": must be -1 (no limit) or at least 0");
  const int64_t ctx = args.get_int("ctx", 0);
  if (ctx < 0) fail("--ctx ", ctx, ": must be positive (0: the model's context length)");
  const BackendRequest backend = backend_request_from(args);
  const bool json = args.has("json");
  TraceRequest trace(args);

  const std::string& path = args.positional()[0];
  ModelFiles files = read_model(path);
  std::vector<model::TokenId> prompt =
      files.tokenizer.encode(prompt_text, /*add_special=*/true, /*parse_special=*/!args.has("no-parse-special"));
  if (args.has("no-bos") && files.tokenizer.add_bos() && !prompt.empty() && prompt.front() == files.tokenizer.bos())
    prompt.erase(prompt.begin());
  if (prompt.empty()) fail("the prompt is empty (and the model adds no BOS token)");
  const int64_t n_prompt = int64_t(prompt.size());
  // The context is --ctx, else the model's (which the engine may cap further by memory: checked again after loading).
  auto check_fits = [&](int64_t n_ctx) {
    if (n_prompt > n_ctx)
      fail("the prompt has ", n_prompt, " tokens, more than the context of ", n_ctx, " (use a larger --ctx)");
    // An explicit -n must fit; the default is simply cut at the end of the context.
    if (explicit_n && n_predict > 0 && n_prompt + n_predict > n_ctx)
      fail("-n ", n_predict, ": the prompt (", n_prompt, " tokens) plus ", n_predict,
           " new tokens exceed the context of ", n_ctx, " (use a larger --ctx or a smaller -n)");
  };
  if (ctx > 0) check_fits(ctx);
  else if (files.config.context_length > 0) check_fits(files.config.context_length);

  LoadedModel loaded = load_model(std::move(files), backend, engine::EngineOptions{.ctx = ctx});
  engine::Engine& engine = loaded.engine;
  const int64_t n_ctx = engine.context_size();
  check_fits(n_ctx);
  trace.attach(engine);

  Utf8Stream utf8;
  auto stream = [&](engine::TokenId, std::string_view piece) {
    const std::string ready = utf8.push(piece);
    if (!ready.empty()) {
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  // -n 0 still evaluates (and times) the prompt; nothing is sampled.
  engine::GenerateResult result =
      engine.generate(prompt, engine::GenerateOptions{.max_tokens = n_predict, .sampling = sampling},
                      json ? engine::TokenCallback{} : engine::TokenCallback(stream));
  result.timings.load_s = loaded.load_s;
  trace.write();

  if (json) {
    // GenerateResult's object, with the model, the backend and the prompt in front.
    const std::string body = result.to_json();
    std::printf("{\"model\":%s,\"backend\":%s,\"device\":%s,\"prompt\":%s,\"prompt_tokens\":[%s],%s\n",
                engine::json_quote(path).c_str(), engine::json_quote(engine.backend().name()).c_str(),
                engine::json_quote(loaded.device).c_str(), engine::json_quote(prompt_text).c_str(),
                id_list(prompt).c_str(), body.c_str() + 1);
  } else {
    const std::string rest = utf8.finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);

  const engine::Timings& t = result.timings;
  std::fprintf(stderr,
               "\n%s | prompt %lld tokens | prefill %s tokens/s | decode %s tokens/s (%lld tokens) | load %.0f ms | "
               "stop: %s\n",
               engine.backend().name().c_str(), static_cast<long long>(n_prompt),
               format_rate(t.prefill_tokens_per_s()).c_str(), format_rate(t.decode_tokens_per_s()).c_str(),
               static_cast<long long>(t.decode_tokens), t.load_s * 1e3, engine::stop_reason_name(result.stop));
  if (result.stop == engine::StopReason::ContextFull)
    std::fprintf(stderr, "context full: generation stopped at the context size of %lld tokens (use a larger --ctx)\n",
                 static_cast<long long>(n_ctx));
  return 0;
}

}  // namespace greta::cli
