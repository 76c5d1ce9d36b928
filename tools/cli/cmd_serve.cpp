// greta-vk serve MODEL: OpenAI's API over HTTP (src/server/server.h). The port is bound before the model loads, so a
// bad address fails at once and /health answers "loading" meanwhile. SIGINT/SIGTERM start a graceful shutdown: new
// requests get 503, in-flight ones get --shutdown-timeout seconds to finish, then the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "args.h"
#include "backend_factory.h"
#include "commands.h"
#include "core/error.h"
#include "generation.h"
#include "server/server.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_serve_options[] = {
    {"host", nullptr, true, "address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)"},
    {"port", nullptr, true, "port (default 8080; 0: any free port, printed at start)"},
    {"ctx", "c", true, "context size per sequence in tokens (default: min(the model's, 4096))"},
    {"parallel", nullptr, true, "sequences generated at once (default 4)"},
    {"max-queue", nullptr, true, "requests waiting beyond those running before answering 429 (default 64)"},
    {"api-key", nullptr, true, "require 'Authorization: Bearer KEY' on the API (repeatable; /health and /metrics stay open)"},
    {"api-key-file", nullptr, true, "read API keys from FILE, one per line"},
    {"model-alias", "a", true, "the model's id in /v1/models and responses (default: the file name without .gguf)"},
    {"chat-template", nullptr, true, "use this template family instead of the model's (chatml, llama2, llama3, ...)"},
    {"cors-origin", nullptr, true, "allow browser requests from this origin ('*' for any); default: CORS off"},
    {"max-body", nullptr, true, "largest request body in bytes (default 1048576; larger: 413)"},
    {"max-prompt", nullptr, true, "longest prompt in tokens (default: the context less one; longer: 400)"},
    {"timeout", nullptr, true, "seconds a client may stay silent while sending a request (default 30)"},
    {"shutdown-timeout", nullptr, true, "seconds in-flight requests get to finish on SIGTERM (default 30)"},
    {"http-threads", nullptr, true, "HTTP worker threads (default: parallel + max-queue + 8)"},
    {"quiet", "q", false, "no per-request log lines"},
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk serve MODEL [--host H] [--port P] [--parallel N] [--ctx C] [--api-key KEY] [--model-alias NAME] "
    "[sampling defaults] [--backend cpu|vk|hip] [--device N]";

std::vector<std::string> read_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--api-key-file ", path, ": cannot read it");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty() && line[0] != '#') keys.push_back(line);
  }
  if (keys.empty()) fail("--api-key-file ", path, ": no key in it");
  return keys;
}

std::string file_stem(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name;
}

int int_option(const Args& args, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = args.get_int(name, fallback);
  if (v < lo || v > hi) fail("--", name, " ", v, ": must be ", lo, "..", hi);
  return int(v);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  const auto specs = join_options({k_serve_options, sampling_option_specs(), kv_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\nServes OpenAI's API: POST /v1/chat/completions, /v1/completions, /tokenize, "
                "/detokenize; GET /v1/models, /health, /metrics (Prometheus). Requests run concurrently with "
                "continuous batching; SIGTERM drains them and exits. docs/server.md has the details.\n\n%s",
                k_usage, usage_options(specs).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  const std::string path = args.positional()[0];

  server::ServerOptions o;
  o.host = args.get("host", "127.0.0.1");
  o.port = int_option(args, "port", 8080, 0, 65535);
  o.parallel = int_option(args, "parallel", 4, 1, 256);
  o.max_queue = int_option(args, "max-queue", 64, 0, 100000);
  o.api_keys = args.get_all("api-key");
  if (args.has("api-key-file"))
    for (std::string& k : read_keys(args.get("api-key-file"))) o.api_keys.push_back(std::move(k));
  for (const std::string& k : o.api_keys)
    if (k.empty()) fail("--api-key: a key must not be empty");
  o.model_alias = args.get("model-alias", file_stem(path));
  if (o.model_alias.empty()) fail("--model-alias must not be empty");
  o.cors_origin = args.get("cors-origin", "");
  o.max_body_bytes = size_t(int_option(args, "max-body", 1 << 20, 1024, 1 << 30));
  o.max_prompt_tokens = int_option(args, "max-prompt", 0, 0, 1 << 30);
  o.read_timeout_s = int_option(args, "timeout", 30, 1, 3600);
  o.shutdown_timeout_s = int_option(args, "shutdown-timeout", 30, 0, 3600);
  o.http_threads = int_option(args, "http-threads", 0, 0, 4096);
  o.log_requests = !args.has("quiet");
  o.sampling = sampling_params_from(args);
  const int64_t ctx = args.get_int("ctx", 0);
  if (ctx < 0) fail("--ctx ", ctx, ": must be positive (0: the default)");
  std::optional<model::ChatTemplate> forced;
  if (args.has("chat-template")) forced = model::ChatTemplate::from_name(args.get("chat-template"));
  const BackendRequest backend = backend_request_from(args);
  ModelFiles files = read_model(path);  // a missing or broken file is the first and only error

  // SIGINT/SIGTERM go to sigwait below, not to whichever thread runs: blocked before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::Server server(o);
  const int port = server.bind();
  server.start();
  std::fprintf(stderr, "greta-vk serve: listening on http://%s:%d (loading the model)\n", o.host.c_str(), port);

  LoadedModel loaded = load_model(std::move(files), backend,
                                  engine::EngineOptions{.ctx = ctx, .max_seqs = o.parallel, .kv_type = kv_type_from(args)});
  const auto template_text = loaded.engine.file().get_string("tokenizer.chat_template");
  const model::ChatTemplate tmpl = forced ? *forced : model::ChatTemplate::detect(template_text.value_or(""));
  // The ready line first, then /health turns 200: a supervisor that sees the one can count on the other.
  std::fprintf(stderr, "greta-vk serve: ready: model '%s', chat template %s, %lld sequences in parallel, "
                       "context %lld per sequence%s\n",
               o.model_alias.c_str(), tmpl.name().c_str(), static_cast<long long>(o.parallel),
               static_cast<long long>(loaded.engine.context_size()), o.api_keys.empty() ? "" : ", API key required");
  server.attach(loaded.engine, tmpl);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "greta-vk serve: %s: finishing requests in flight (up to %d s), then stopping\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_timeout_s);
  server.shutdown();
  std::fprintf(stderr, "greta-vk serve: stopped\n");
  return 0;
}

}  // namespace greta::cli
