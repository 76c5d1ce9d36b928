// greta-vk run MODEL -p PROMPT: generates a continuation, streamed to stdout as it is produced (or one JSON object
// with --json), with a summary on stderr.
#include <chrono>
#include <cstdio>
#include <string>

#include "args.h"
#include "backend_factory.h"
#include "commands.h"
#include "core/error.h"
#include "engine/batch.h"
#include "generation.h"
#include "json_output.h"
#include "interrupt.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_run_options[] = {
    {"prompt", "p", true, "the prompt text"},
    {"file", "f", true, "read the prompt from a file"},
    {"n-predict", "n", true, "tokens to generate at most (default 128; -1: until end of text or a full context)"},
    {"ctx", "c", true, "context size per sequence in tokens (default: 4096, or the model's if smaller)"},
    {"stop", nullptr, true, "stop when the text contains this string (not printed); repeatable"},
    {"prompts-file", nullptr, true, "run one prompt per line of FILE concurrently (continuous batching)"},
    {"parallel", nullptr, true, "sequences in flight with --prompts-file (default 4)"},
    {"no-bos", nullptr, false, "do not add the BOS token the model would add"},
    {"no-parse-special", nullptr, false, "treat special-token text like <|im_start|> in the prompt as plain text"},
    {"json", nullptr, false, "print one JSON object (prompt_tokens, tokens, text, stop, timings) instead of text"},
    TraceRequest::option,
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk run MODEL (-p PROMPT | -f FILE | --prompts-file FILE [--parallel N]) [-n N] [--ctx C] "
    "[sampling options] [--kv-type f16|f32|q8_0] [--backend cpu|vk|hip] [--device N] [--threads N] [--no-bos] [--json] "
    "[--trace FILE]";

constexpr int64_t kMaxParallel = 1024;
constexpr size_t kMaxPrompts = 100000;

constexpr int64_t kDefaultPredict = 128;

std::vector<model::TokenId> encode_prompt(const model::Tokenizer& tokenizer, const std::string& text, const Args& args) {
  std::vector<model::TokenId> prompt =
      tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/!args.has("no-parse-special"));
  if (args.has("no-bos") && tokenizer.add_bos() && !prompt.empty() && prompt.front() == tokenizer.bos())
    prompt.erase(prompt.begin());
  return prompt;
}

// The lines of a prompts file (64 MiB at most; empty lines are skipped, a trailing \r is dropped).
std::vector<std::string> read_prompt_lines(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("--prompts-file ", path, ": cannot open it");
  std::string text;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
    text.append(buf, n);
    if (text.size() > (size_t(64) << 20)) {
      std::fclose(f);
      fail("--prompts-file ", path, ": larger than 64 MiB");
    }
  }
  std::fclose(f);
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    start = end + 1;
  }
  if (lines.empty()) fail("--prompts-file ", path, ": no prompts (one per line)");
  if (lines.size() > kMaxPrompts) fail("--prompts-file ", path, ": more than ", kMaxPrompts, " prompts");
  return lines;
}

// run --prompts-file: every line a request, `parallel` of them in flight; results printed in input order.
int run_prompts(const Args& args, const std::string& path, const engine::SamplerParams& sampling, int64_t n_predict,
                int64_t ctx, const BackendRequest& backend, bool json) {
  const int64_t parallel = args.get_int("parallel", 4);
  if (parallel < 1 || parallel > kMaxParallel) fail("--parallel ", parallel, ": must be 1..", kMaxParallel);
  const std::vector<std::string> lines = read_prompt_lines(args.get("prompts-file"));
  ModelFiles files = read_model(path);
  std::vector<engine::BatchRequest> requests;
  for (size_t i = 0; i < lines.size(); ++i) {
    engine::BatchRequest r;
    r.prompt = encode_prompt(files.tokenizer, lines[i], args);
    r.options = engine::GenerateOptions{.max_tokens = n_predict, .sampling = sampling};
    if (r.options.sampling.seed != 0) r.options.sampling.seed += i;  // distinct streams, reproducible from --seed
    requests.push_back(std::move(r));
  }
  LoadedModel loaded = load_model(std::move(files), backend,
                                  engine::EngineOptions{.ctx = ctx, .max_seqs = parallel, .kv_type = kv_type_from(args)});
  engine::Engine& engine = loaded.engine;
  InterruptHandlers interrupts;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<engine::BatchResult> results = engine::run_batch(
      engine, requests, {.parallel = parallel, .on_done = {}, .interrupted = [] { return interrupt_requested(); }});
  const int signal = interrupts.take();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t generated = 0, prompt_tokens = 0, reused = 0, failed = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const engine::BatchResult& r = results[i];
    generated += int64_t(r.result.tokens.size());
    prompt_tokens += int64_t(requests[i].prompt.size());
    reused += r.reused_tokens;
    if (!r.error.empty()) ++failed;
    if (json) {
      Json out = {{"index", i}, {"model", path}, {"backend", engine.backend().name()}, {"device", loaded.device},
                  {"prompt", lines[i]}, {"prompt_tokens", requests[i].prompt}, {"cached_tokens", r.reused_tokens}};
      if (r.error.empty()) out.update(result_json(r.result, r.interrupted ? "interrupted" : nullptr));
      else out["error"] = r.error;
      std::printf("%s\n", dump_json(out).c_str());
    } else {
      greta::Utf8Stream utf8;
      const std::string text = !r.error.empty() ? "error: " + r.error
                               : utf8.push(r.result.text) + utf8.finish() + (r.interrupted ? " [interrupted]" : "");
      std::printf("--- prompt %zu: %s\n%s\n", i + 1, lines[i].c_str(), text.c_str());
    }
  }
  std::fflush(stdout);
  std::fprintf(stderr,
               "\n%s | %zu prompts (%lld tokens, %lld reused from shared prefixes), %lld in parallel | %lld tokens "
               "generated in %.2f s: %s tokens/s%s\n",
               engine.backend().name().c_str(), results.size(), static_cast<long long>(prompt_tokens),
               static_cast<long long>(reused), static_cast<long long>(parallel), static_cast<long long>(generated),
               seconds, format_rate(seconds > 0 ? double(generated) / seconds : 0).c_str(),
               failed ? cat(" | ", failed, " failed").c_str() : "");
  if (signal) {
    int64_t cut = 0;
    for (const engine::BatchResult& r : results) cut += r.interrupted;
    std::fprintf(stderr, "stop: interrupted (%lld of %zu prompts not finished)\n", static_cast<long long>(cut),
                 results.size());
    return interrupted_exit_code(signal);
  }
  return failed ? 1 : 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const auto specs = join_options({k_run_options, sampling_option_specs(), kv_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\nGenerates text from a prompt, streaming it to stdout; a summary goes to stderr.\n\n%s",
                k_usage, usage_options(specs).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  // Everything the user typed is checked before the (possibly slow) model load.
  const engine::SamplerParams sampling = sampling_params_from(args);
  if (args.has("prompts-file")) {
    if (args.has("prompt") || args.has("file")) fail("--prompts-file replaces -p and -f: give one of them");
    const int64_t n = args.get_int("n-predict", kDefaultPredict), c = args.get_int("ctx", 0);
    if (n < -1) fail("-n ", n, ": must be -1 (no limit) or at least 0");
    if (c < 0) fail("--ctx ", c, ": must be positive (0: the default)");
    if (args.has("trace")) fail("--trace is not supported with --prompts-file");
    return run_prompts(args, args.positional()[0], sampling, n, c, backend_request_from(args), args.has("json"));
  }
  if (args.has("parallel")) fail("--parallel needs --prompts-file");
  const std::string prompt_text = read_prompt(args);
  const int64_t n_predict = args.get_int("n-predict", kDefaultPredict);
  if (n_predict < -1) fail("-n ", n_predict, ": must be -1 (no limit) or at least 0");
  const int64_t ctx = args.get_int("ctx", 0);
  if (ctx < 0) fail("--ctx ", ctx, ": must be positive (0: the model's context length)");
  const BackendRequest backend = backend_request_from(args);
  const bool json = args.has("json");
  TraceRequest trace(args);

  const std::string& path = args.positional()[0];
  ModelFiles files = read_model(path);
  std::vector<model::TokenId> prompt = encode_prompt(files.tokenizer, prompt_text, args);
  if (prompt.empty()) fail("the prompt is empty (and the model adds no BOS token)");
  if (prompt.size() >= 2 && files.tokenizer.add_bos() && prompt[0] == files.tokenizer.bos() &&
      prompt[1] == files.tokenizer.bos())
    std::fprintf(stderr, "warning: the prompt starts with the BOS text %s and the model adds BOS itself: the prompt "
                 "now starts with two (--no-bos keeps one)\n", std::string(files.tokenizer.token_text(prompt[0])).c_str());
  const int64_t n_prompt = int64_t(prompt.size());
  // The prompt must fit the context (--ctx, else the default the engine chooses: checked again after loading). -n is
  // "at most": generation stops at a full context and says so (stop "context_full"), whatever -n asked for.
  auto check_fits = [&](int64_t n_ctx) {
    if (n_prompt > n_ctx)
      fail("the prompt has ", n_prompt, " tokens, more than the context of ", n_ctx, " (use a larger --ctx)");
  };
  if (ctx > 0) check_fits(ctx);

  LoadedModel loaded = load_model(std::move(files), backend, engine::EngineOptions{.ctx = ctx, .kv_type = kv_type_from(args)});
  engine::Engine& engine = loaded.engine;
  const int64_t n_ctx = engine.context_size();
  check_fits(n_ctx);
  trace.attach(engine);

  // Ctrl-C / SIGTERM end the generation at the next token; the output so far and the summary are still printed.
  // Installed after the load, so that a Ctrl-C while the model loads ends the program at once.
  InterruptHandlers interrupts;
  greta::Utf8Stream utf8;
  auto stream = [&](engine::TokenId, std::string_view piece) {
    const std::string ready = utf8.push(piece);
    if (!ready.empty() && !json) {
      std::fwrite(ready.data(), 1, ready.size(), stdout);
      std::fflush(stdout);
    }
    return !interrupt_requested();
  };
  // -n 0 still evaluates (and times) the prompt; nothing is sampled.
  engine::GenerateResult result = engine.generate(
      prompt, engine::GenerateOptions{.max_tokens = n_predict, .sampling = sampling, .stop = args.get_all("stop")},
      stream);
  result.timings.load_s = loaded.load_s;
  const int signal = result.stop == engine::StopReason::Callback ? interrupts.take() : 0;
  trace.write();

  if (json) {
    // GenerateResult's object, with the model, the backend and the prompt in front. The engine's name for a stop
    // its callback asked for is "callback"; here that is always an interrupt.
    Json out = {{"model", path}, {"backend", engine.backend().name()}, {"device", loaded.device},
                {"seed", sampling.seed}, {"prompt", prompt_text}, {"prompt_tokens", prompt}};
    out.update(result_json(result, signal ? "interrupted" : nullptr));
    std::printf("%s\n", dump_json(out).c_str());
  } else {
    const std::string rest = utf8.finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);

  const engine::Timings& t = result.timings;
  const char* stop = signal ? "interrupted" : engine::stop_reason_name(result.stop);
  std::fprintf(stderr,
               "\n%s | prompt %lld %s | prefill %s tokens/s | decode %s tokens/s (%lld %s) | load %.0f ms | seed %llu | "
               "stop: %s\n",
               engine.backend().name().c_str(), static_cast<long long>(n_prompt), n_prompt == 1 ? "token" : "tokens",
               format_rate(t.prefill_tokens_per_s()).c_str(), format_rate(t.decode_tokens_per_s()).c_str(),
               static_cast<long long>(t.decode_tokens), t.decode_tokens == 1 ? "token" : "tokens", t.load_s * 1e3,
               static_cast<unsigned long long>(sampling.seed), stop);
  if (const std::string crossings = describe_crossings(loaded); !crossings.empty())
    std::fprintf(stderr, "%s\n", crossings.c_str());
  if (result.stop == engine::StopReason::ContextFull)
    std::fprintf(stderr, "context full: generation stopped at the context size of %lld tokens (use a larger --ctx)\n",
                 static_cast<long long>(n_ctx));
  return signal ? interrupted_exit_code(signal) : 0;
}

}  // namespace greta::cli
