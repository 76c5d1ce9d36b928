#include "server/metrics.h"

#include <cstdio>

#include "core/error.h"

namespace greta::server {

namespace {

template <class... Parts>
std::string cat_line(const Parts&... parts) {
  return cat(parts..., "\n");
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// A label value with Prometheus' escapes (backslash, quote, newline).
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
            0.75, 1, 2.5}),
      e2e_({0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960}) {}

void Metrics::set_gauges(const QueueGauges& g) {
  std::lock_guard lock(mutex_);
  gauges_ = g;
}

QueueGauges Metrics::gauges() const {
  std::lock_guard lock(mutex_);
  return gauges_;
}

void Metrics::add_tokens(int64_t prompt, int64_t cached, int64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  cached_tokens_ += cached;
  generation_tokens_ += generated;
}

void Metrics::request_succeeded(const std::string& finish_reason) {
  std::lock_guard lock(mutex_);
  ++success_[finish_reason];
}

void Metrics::request_failed(const std::string& why) {
  std::lock_guard lock(mutex_);
  ++failure_[why];
}

void Metrics::observe_ttft(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}

void Metrics::observe_inter_token(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}

void Metrics::observe_e2e(double s) {
  std::lock_guard lock(mutex_);
  e2e_.observe(s);
}

std::string Metrics::render(const std::string& model_name) const {
  std::lock_guard lock(mutex_);
  std::string out;
  const std::string model = label(model_name);
  const auto gauge = [&](const char* name, const char* help, double v) {
    out += cat_line("# HELP ", name, " ", help);
    out += cat_line("# TYPE ", name, " gauge");
    out += std::string(name) + "{model_name=\"" + model + "\"} " + number(v) + "\n";
  };
  const auto counter = [&](const char* name, const char* help, double v) {
    out += cat_line("# HELP ", name, " ", help);
    out += cat_line("# TYPE ", name, " counter");
    out += std::string(name) + "{model_name=\"" + model + "\"} " + number(v) + "\n";
  };
  gauge("greta:num_requests_waiting", "Requests queued, not yet admitted.", double(gauges_.waiting));
  gauge("greta:num_requests_running", "Requests admitted and not finished.", double(gauges_.running));
  gauge("greta:kv_cache_usage_perc", "KV cache pages held by running requests over the budget (1 = 100%).",
        gauges_.kv_pages_total > 0 ? double(gauges_.kv_pages_used) / double(gauges_.kv_pages_total) : 0);
  gauge("greta:kv_cache_pages_used", "KV cache pages held by running requests.", double(gauges_.kv_pages_used));
  gauge("greta:kv_cache_pages_cached", "KV cache pages kept only for prefix reuse (free on demand).",
        double(gauges_.kv_pages_cached));
  gauge("greta:kv_cache_pages_total", "KV cache budget in pages.", double(gauges_.kv_pages_total));
  counter("greta:prompt_tokens_total", "Prompt tokens of finished requests.", double(prompt_tokens_));
  counter("greta:prompt_tokens_cached_total", "Prompt tokens reused from cached KV pages.", double(cached_tokens_));
  counter("greta:generation_tokens_total", "Generated tokens.", double(generation_tokens_));
  out += "# HELP greta:request_success_total Finished requests by finish reason.\n";
  out += "# TYPE greta:request_success_total counter\n";
  for (const char* reason : {"stop", "length"}) {
    const auto it = success_.find(reason);
    out += "greta:request_success_total{model_name=\"" + model + "\",finished_reason=\"" + reason + "\"} " +
           std::to_string(it == success_.end() ? 0 : it->second) + "\n";
  }
  out += "# HELP greta:request_failure_total Requests answered with an error, or cancelled by the client.\n";
  out += "# TYPE greta:request_failure_total counter\n";
  for (const auto& [why, n] : failure_)
    out += "greta:request_failure_total{model_name=\"" + model + "\",reason=\"" + label(why) + "\"} " +
           std::to_string(n) + "\n";
  const auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    out += cat_line("# HELP ", name, " ", help);
    out += cat_line("# TYPE ", name, " histogram");
    h.render(out, name);
  };
  histogram("greta:time_to_first_token_seconds", "Request arrival to its first token.", ttft_);
  histogram("greta:inter_token_latency_seconds", "Time between consecutive tokens of a choice.", itl_);
  histogram("greta:e2e_request_latency_seconds", "Request arrival to its end.", e2e_);
  return out;
}

}  // namespace greta::server
