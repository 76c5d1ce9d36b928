#include "server/server.h"

#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "core/error.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/responses.h"

namespace greta::server {

namespace {

constexpr auto kHeartbeat = std::chrono::milliseconds(1000);  // how often a silent response probes its client

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sockets of this process on local `port`: the listening one and the connections accepted on it. httplib 0.11
// keeps its sockets to itself, so they are found through /proc/self/fd.
struct PortSocket {
  int fd;
  bool listening;
};
std::vector<PortSocket> sockets_on_port(int port) {
  std::vector<PortSocket> out;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return out;
  std::vector<int> fds;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == 0 && fd != dirfd(dir)) fds.push_back(int(fd));
  }
  closedir(dir);
  for (int fd : fds) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{};
    socklen_t local_size = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) continue;
    const int local_port = local.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port)
                           : local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                                                         : -1;
    if (local_port != port) continue;
    int accepting = 0;
    socklen_t size = sizeof accepting;
    const bool listening = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) == 0 && accepting != 0;
    out.push_back({fd, listening});
  }
  return out;
}

// httplib 0.11 listens with a backlog of 5: a burst of clients (32 streams opened at once in the tests, many users
// after an outage in production) overflows it and the kernel answers some with resets. Listening again on the same
// socket widens the queue to the system's limit.
void widen_listen_backlog(int port) {
  for (const PortSocket& s : sockets_on_port(port))
    if (s.listening) ::listen(s.fd, SOMAXCONN);
}

// Shuts down every connection accepted on `port` that is still open (idle keep-alive connections, clients that stopped
// reading). httplib 0.11's Server::stop() closes only the listening socket and then joins its workers, and a worker
// waits out the keep-alive timeout (5 s) on an idle connection, or the write timeout on a stalled one, before it looks
// at the server again: SIGTERM would take that much longer than --shutdown-timeout.
void shutdown_connections(int port) {
  for (const PortSocket& s : sockets_on_port(port))
    if (!s.listening) ::shutdown(s.fd, SHUT_RDWR);
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  httplib::Server http;
  std::thread http_thread;
  Metrics metrics;

  // Set once by attach(), read by HTTP threads after `ready` (release/acquire).
  engine::Engine* engine = nullptr;
  model::ChatTemplate chat_template;
  int64_t context = 0, vocab = 0;
  std::unique_ptr<EngineLoop> loop;
  std::atomic<bool> ready{false}, shutting_down{false};
  std::atomic<int64_t> open_responses{0};  // completion responses still being written
  std::atomic<uint64_t> serial{0};
  int bound_port = 0;
  uint64_t id_salt = std::random_device{}();

  explicit Impl(ServerOptions o) : options(std::move(o)) {}

  void respond_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(e.to_json()), "application/json");
    if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
    metrics.request_failed(std::to_string(e.status));
  }

  void log(const char* format, auto... args) {
    if (options.log_requests) std::fprintf(stderr, format, args...);
  }

  std::string next_id(const char* prefix) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%08llx%08llx", prefix, static_cast<unsigned long long>(id_salt & 0xffffffffu),
                  static_cast<unsigned long long>(++serial));
    return buf;
  }

  // Pre-routing: CORS (when asked for) and the API key. Returns true when the request was answered here.
  bool gate(const httplib::Request& req, httplib::Response& res) {
    if (!options.cors_origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", options.cors_origin);
      if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
        res.status = 204;
        return true;
      }
    }
    if (options.api_keys.empty() || req.path == "/health" || req.path == "/metrics") return false;
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0) {
      const std::string_view key = std::string_view(auth).substr(kBearer.size());
      bool ok = false;
      for (const std::string& k : options.api_keys) ok |= constant_time_equal(key, k);
      if (ok) return false;
    }
    respond_error(res, {401, "invalid or missing API key (Authorization: Bearer KEY)", "", "invalid_api_key"});
    return true;
  }

  // The API's answer while the model loads or the server stops; nullptr when requests can run.
  const char* unavailable() const {
    if (shutting_down.load()) return "the server is shutting down";
    if (!ready.load(std::memory_order_acquire)) return "the model is loading";
    return nullptr;
  }

  std::vector<TokenId> prompt_tokens(const CompletionRequest& r) const {
    const model::Tokenizer& tok = engine->tokenizer();
    if (r.endpoint == Endpoint::ChatCompletions) {
      const auto segments = model::render_conversation_segments(chat_template, r.messages, /*add_assistant=*/true);
      return model::tokenize_segments(tok, segments, /*add_bos=*/true);
    }
    if (!r.prompt_tokens.empty()) {
      for (TokenId t : r.prompt_tokens)
        if (t >= vocab) throw ApiError{400, cat("prompt token ", t, " is outside the vocabulary (", vocab, ")"), "prompt", ""};
      return r.prompt_tokens;
    }
    // A raw prompt is the caller's own template: special tokens in it are parsed, as llama-server does.
    return tok.encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
  }

  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    if (const char* why = unavailable()) return respond_error(res, {503, why, "", ""});
    CompletionRequest r;
    std::vector<TokenId> prompt;
    try {
      r = parse_completion_request(endpoint, req.body, options.sampling, options.limits);
      if (!r.model.empty() && r.model != options.model_alias)
        throw ApiError{404, cat("the model '", r.model, "' does not exist; this server has '", options.model_alias, "'"),
                       "model", "model_not_found"};
      if (r.n > options.parallel)
        throw ApiError{400, cat("'n' is ", r.n, "; this server runs at most ", options.parallel,
                                " sequences at once (--parallel)"), "n", ""};
      prompt = prompt_tokens(r);
      const int64_t limit = options.max_prompt_tokens > 0 ? std::min(options.max_prompt_tokens, context - 1) : context - 1;
      if (int64_t(prompt.size()) > limit)
        throw ApiError{400, cat("the prompt has ", prompt.size(), " tokens; at most ", limit, " fit (context ", context,
                                ")"), endpoint == Endpoint::ChatCompletions ? "messages" : "prompt",
                       "context_length_exceeded"};
    } catch (const ApiError& e) {
      return respond_error(res, e);
    }
    // max_tokens is clamped to the context; absent, generation may fill it.
    const int64_t room = context - int64_t(prompt.size());
    const int64_t max_tokens = r.max_tokens ? std::min(*r.max_tokens, room) : room;
    if (!r.seed_given) r.sampling.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);

    auto job = std::make_shared<Job>();
    job->request.prompt = std::move(prompt);
    job->request.options.max_tokens = max_tokens;
    job->request.options.sampling = r.sampling;
    job->request.options.stop = r.stop;
    job->request.n = r.n;
    job->request.top_logprobs = r.top_logprobs;
    // What the scheduler would refuse (here: more KV pages than the budget), answered as a 400 now, not a failed stream.
    if (const std::string why = engine::request_rejection(*engine, options.parallel, job->request); !why.empty())
      return respond_error(res, {400, why + ": lower max_tokens or n", "max_tokens", ""});
    if (!loop->try_submit(job, options.parallel + options.max_queue))
      return respond_error(res, {429, cat("too many requests: ", options.parallel, " running and ", options.max_queue,
                                          " waiting; retry later"), "", ""});

    const bool chat = endpoint == Endpoint::ChatCompletions;
    const std::string id = next_id(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    auto response = std::make_shared<CompletionResponse>(r, id, options.model_alias, created, engine->tokenizer());
    ++open_responses;
    if (r.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");  // proxies must not buffer the stream
    }
    struct Progress {
      bool opened = false;
      Clock::time_point last_write = Clock::now();
      std::deque<engine::RequestEvent> events;
      std::vector<std::string> chunks;
      bool counted = false;  // in greta:request_success_total
    };
    auto progress = std::make_shared<Progress>();
    const bool stream = r.stream;
    const std::string path = req.path;
    res.set_chunked_content_provider(
        stream ? "text/event-stream" : "application/json",
        [this, job, response, progress, stream](size_t, httplib::DataSink& sink) {
          const auto send = [&](const std::string& text) {
            if (!sink.write(text.data(), text.size())) return false;
            progress->last_write = Clock::now();
            return true;
          };
          if (stream && !progress->opened) {
            progress->opened = true;
            for (const std::string& c : response->opening_chunks())
              if (!send("data: " + c + "\n\n")) return false;
          }
          progress->events.clear();
          const bool more = job->take_events(progress->events, kHeartbeat);
          progress->chunks.clear();
          for (const auto& ev : progress->events) response->on_event(ev, progress->chunks);
          // Counted as soon as it finishes, before its last bytes go out: a client that reads /metrics after them
          // sees it (counted after the response, it could read the count without it).
          if (response->finished() && !progress->counted) {
            metrics.request_succeeded(response->finish_reason());
            progress->counted = true;
          }
          for (const std::string& c : progress->chunks)
            if (!send(stream ? "data: " + c + "\n\n" : c)) return false;
          if (!more) {
            if (stream && !response->failed() && !send("data: [DONE]\n\n")) return false;
            if (!stream && !send(response->failed() ? dump(ApiError{500, response->error(), "", ""}.to_json())
                                                    : dump(response->final_json())))
              return false;
            sink.done();
            return true;
          }
          // Nothing sent for a while (no event, or events that release no bytes: a non-streamed response, text held
          // back by a stop string): probe the client (an SSE comment, or JSON's leading whitespace), so a client that
          // went away is noticed and its sequences freed.
          if (Clock::now() - progress->last_write >= kHeartbeat && !send(stream ? ": keep-alive\n\n" : " "))
            return false;
          return true;
        },
        [this, job, response, path, id](bool) {
          bool ended;
          {
            std::lock_guard lock(job->mutex);
            ended = job->ended;
          }
          if (!ended || !response->finished()) loop->cancel(job);  // gone mid-way: free its pages now
          const engine::RequestUsage& u = response->usage();
          const char* outcome = response->failed() ? "failed" : response->finished() ? response->finish_reason().c_str()
                                                                                    : "cancelled";
          if (!response->finished() && response->failed()) metrics.request_failed("500");
          log("greta-vk serve: %s %s prompt %lld (cached %lld) completion %lld, queued %.0f ms, prefill %.0f ms, "
              "decode %.0f ms, total %.0f ms: %s\n",
              id.c_str(), path.c_str(), static_cast<long long>(u.prompt_tokens), static_cast<long long>(u.cached_tokens),
              static_cast<long long>(u.completion_tokens), u.queued_s * 1e3, u.prefill_s * 1e3, u.decode_s * 1e3,
              seconds_since(job->arrival) * 1e3, outcome);
          --open_responses;
        });
  }

  void routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return gate(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const bool ok = ready.load(std::memory_order_acquire) && !shutting_down.load();
      res.status = ok ? 200 : 503;
      res.set_content(ok ? R"({"status":"ok"})" : shutting_down.load() ? R"({"status":"shutting down"})"
                                                                         : R"({"status":"loading model"})",
                      "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(options.model_alias), "text/plain; version=0.0.4");
    });
    const auto models = [this](const httplib::Request&, httplib::Response& res) {
      json model = {{"id", options.model_alias}, {"object", "model"}, {"created", 0}, {"owned_by", "greta"}};
      if (ready.load(std::memory_order_acquire))
        model["meta"] = {{"n_ctx", context}, {"n_vocab", vocab}, {"parallel", options.parallel}};
      res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
    };
    http.Get("/v1/models", models);
    http.Get("/models", models);
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
      http.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
        completion(req, res, Endpoint::ChatCompletions);
      });
    for (const char* path : {"/v1/completions", "/completions"})
      http.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
        completion(req, res, Endpoint::Completions);
      });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (const char* why = unavailable()) return respond_error(res, {503, why, "", ""});
      try {
        const TokenizeRequest t = parse_tokenize_request(req.body, options.limits);
        const model::Tokenizer& tok = engine->tokenizer();
        const auto ids = tok.encode(t.content, t.add_special, t.parse_special);
        json tokens = json::array();
        for (TokenId id : ids) {
          if (t.with_pieces) tokens.push_back({{"id", id}, {"piece", tok.token_to_piece(id, true)}});
          else tokens.push_back(id);
        }
        res.set_content(dump({{"tokens", std::move(tokens)}}), "application/json");
      } catch (const ApiError& e) {
        respond_error(res, e);
      }
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (const char* why = unavailable()) return respond_error(res, {503, why, "", ""});
      try {
        const auto ids = parse_detokenize_request(req.body, vocab, options.limits);
        res.set_content(dump({{"content", engine->tokenizer().decode(ids)}}), "application/json");
      } catch (const ApiError& e) {
        respond_error(res, e);
      }
    });
    // Statuses httplib sets itself (no route, body too large, malformed HTTP) get OpenAI's error object too.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 404   ? cat("no route for ", req.method, " ", req.path)
                                  : res.status == 413 ? cat("the body is larger than ", options.max_body_bytes, " bytes")
                                                      : cat("HTTP error ", res.status);
      res.set_content(dump(ApiError{res.status, message, "", ""}.to_json()), "application/json");
      metrics.request_failed(std::to_string(res.status));
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      respond_error(res, {500, what, "", ""});
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const bool completion = req.path.find("completions") != std::string::npos && res.status == 200;
      const bool probe = (req.path == "/health" || req.path == "/metrics") && res.status < 400;
      if (!completion && !probe) log("greta-vk serve: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  ServerOptions& o = impl_->options;
  if (o.parallel < 1) fail("--parallel ", o.parallel, ": must be at least 1");
  if (o.max_queue < 0) fail("--max-queue ", o.max_queue, ": must not be negative");
  const int threads = o.http_threads > 0 ? o.http_threads : int(std::min<int64_t>(o.parallel + o.max_queue + 8, 1024));
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  impl_->http.set_payload_max_length(o.max_body_bytes);
  impl_->http.set_read_timeout(o.read_timeout_s, 0);
  impl_->http.set_write_timeout(o.read_timeout_s, 0);
  impl_->http.set_keep_alive_timeout(5);
  impl_->http.set_tcp_nodelay(true);  // a streamed token is one small write: Nagle + delayed ACK held it ~40 ms
  impl_->routes();
}

Server::~Server() { shutdown(); }

int Server::bind() {
  const ServerOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) port = impl_->http.bind_to_any_port(o.host);
  else if (!impl_->http.bind_to_port(o.host, port)) port = -1;
  if (port < 0) fail("cannot listen on ", o.host, ":", o.port, " (in use, or not an address of this machine)");
  widen_listen_backlog(port);
  impl_->bound_port = port;
  return port;
}

void Server::start() {
  impl_->http_thread = std::thread([this] { impl_->http.listen_after_bind(); });
}

void Server::attach(engine::Engine& engine, model::ChatTemplate chat_template) {
  Impl& s = *impl_;
  s.engine = &engine;
  s.chat_template = chat_template;
  s.context = engine.context_size();
  s.vocab = engine.vocab_size();
  s.loop = std::make_unique<EngineLoop>(
      engine, engine::SchedulerOptions{.parallel = s.options.parallel, .retain_prompts = std::max<int64_t>(8, s.options.parallel)},
      s.metrics);
  s.ready.store(true, std::memory_order_release);
}

void Server::shutdown() {
  Impl& s = *impl_;
  if (s.shutting_down.exchange(true)) return;
  if (s.loop) {
    const auto deadline = Clock::now() + std::chrono::seconds(s.options.shutdown_timeout_s);
    while (s.loop->in_flight() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.loop->stop();  // what is left fails with "the server is shutting down"
    // Let the responses write their last bytes before HTTP stops.
    const auto flush_deadline = Clock::now() + std::chrono::seconds(2);
    while (s.open_responses.load() > 0 && Clock::now() < flush_deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (s.bound_port > 0) shutdown_connections(s.bound_port);  // the responses are written: close what is left open
  s.http.stop();
  if (s.http_thread.joinable()) s.http_thread.join();
}

}  // namespace greta::server
