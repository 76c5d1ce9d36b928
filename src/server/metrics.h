// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4). Names follow vLLM's, under the
// "greta:" prefix, so the Kubernetes Gateway API Inference Extension's endpoint picker reads them with its
// model-server metric flags pointed at greta:num_requests_waiting and greta:kv_cache_usage_perc (docs/deploy.md):
//
//   greta:num_requests_waiting         gauge      requests queued, not yet admitted
//   greta:num_requests_running         gauge      requests admitted (holding sequences), not finished
//   greta:kv_cache_usage_perc          gauge      KV pages held by running requests / the budget (0..1); pages kept
//                                                 only for prefix reuse count as free, as vLLM's cached blocks do
//   greta:kv_cache_pages_used          gauge      pages held by running requests
//   greta:kv_cache_pages_cached        gauge      pages kept for prefix reuse only
//   greta:kv_cache_pages_total         gauge      the budget in pages
//   greta:prompt_tokens_total          counter    prompt tokens of finished requests
//   greta:prompt_tokens_cached_total   counter    of which reused from cached pages
//   greta:generation_tokens_total      counter    generated tokens
//   greta:request_success_total        counter    by finished_reason (stop, length)
//   greta:request_failure_total        counter    by status (4xx/5xx answers, cancelled)
//   greta:time_to_first_token_seconds  histogram  request arrival to its first token
//   greta:inter_token_latency_seconds  histogram  between consecutive tokens of a choice
//   greta:e2e_request_latency_seconds  histogram  request arrival to its end
//
// Thread-safe: HTTP threads and the engine thread update, /metrics renders.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace greta::server {

class Histogram {
public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Prometheus lines for `name` (buckets, sum, count); caller holds the registry's lock.
  void render(std::string& out, const std::string& name) const;

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct QueueGauges {
  int64_t waiting = 0, running = 0;
  int64_t kv_pages_used = 0, kv_pages_cached = 0, kv_pages_total = 0;
};

class Metrics {
public:
  Metrics();
  void set_gauges(const QueueGauges& g);
  QueueGauges gauges() const;
  void add_tokens(int64_t prompt, int64_t cached, int64_t generated);
  void request_succeeded(const std::string& finish_reason);
  void request_failed(const std::string& why);  // "400", "429", "cancelled", ...
  void observe_ttft(double s);
  void observe_inter_token(double s);
  void observe_e2e(double s);
  std::string render(const std::string& model_name) const;

private:
  mutable std::mutex mutex_;
  QueueGauges gauges_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, uint64_t> success_, failure_;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace greta::server
