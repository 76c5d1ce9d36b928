// `greta-vk serve`: OpenAI's API over HTTP/1.1 (cpp-httplib), one model, many concurrent requests through the
// engine's scheduler (engine_loop.h). docs/server.md lists the endpoints and fields; docs/deploy.md runs it as a
// service, in a container and on Kubernetes.
//
// Life cycle: bind() (the port is known before the model loads), start() (HTTP answers; /health says 503 "loading"
// and the API 503), attach() the loaded engine (ready: /health 200), shutdown() on SIGTERM (new requests get 503,
// in-flight ones get up to shutdown_timeout to finish, the rest are cancelled, then HTTP stops).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/chat_template.h"
#include "server/api.h"

namespace greta::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (bind() says which)
  std::string model_alias;            // the model's id in /v1/models and responses
  std::vector<std::string> api_keys;  // empty: no key needed; else "Authorization: Bearer KEY" (401 otherwise)
  int64_t parallel = 4;               // sequences in flight
  int64_t max_queue = 64;             // requests waiting beyond those running; more → 429
  size_t max_body_bytes = 1 << 20;    // larger bodies → 413
  int64_t max_prompt_tokens = 0;      // longer prompts → 400; 0: the context less one
  int read_timeout_s = 30;            // a client that sends nothing for this long is dropped (slow headers/body)
  int shutdown_timeout_s = 30;        // time in-flight requests get to finish after SIGTERM
  std::string cors_origin;            // "": CORS off; else the Access-Control-Allow-Origin value ("*" or an origin)
  int http_threads = 0;               // 0: parallel + max_queue + 8 (a streaming request holds a thread)
  bool log_requests = true;           // one line per request on stderr
  engine::SamplerParams sampling;     // defaults for fields a request leaves out
  RequestLimits limits;
};

class Server {
public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws greta::Error when the address cannot be bound.
  int bind();
  // Serves HTTP on a thread of its own (the model may still be loading).
  void start();
  // The model is loaded: requests run on `engine` from now on (it must outlive the server's use: until shutdown()).
  void attach(engine::Engine& engine, model::ChatTemplate chat_template);
  // Stops accepting requests, lets in-flight ones finish (up to shutdown_timeout_s), cancels the rest, stops HTTP.
  void shutdown();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace greta::server
