#include "server/engine_loop.h"

#include <cstdio>

#include "core/error.h"

namespace greta::server {

bool Job::take_events(std::deque<engine::RequestEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex);
  ready.wait_for(lock, timeout, [&] { return !events.empty() || ended; });
  const bool more = !events.empty() || !ended;
  while (!events.empty()) {
    out.push_back(std::move(events.front()));
    events.pop_front();
  }
  return more;
}

EngineLoop::EngineLoop(engine::Engine& engine, const engine::SchedulerOptions& options, Metrics& metrics)
    : engine_(engine), metrics_(metrics), scheduler_(engine, options) {
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

bool EngineLoop::try_submit(std::shared_ptr<Job> job, int64_t max_in_flight) {
  int64_t n = in_flight_.load();
  do {
    if (n >= max_in_flight) return false;
  } while (!in_flight_.compare_exchange_weak(n, n + 1));
  {
    std::lock_guard lock(inbox_mutex_);
    submissions_.push_back(std::move(job));
  }
  inbox_ready_.notify_one();
  return true;
}

void EngineLoop::cancel(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(inbox_mutex_);
    cancellations_.push_back(std::move(job));
  }
  inbox_ready_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(inbox_mutex_);
    stopping_ = true;
  }
  inbox_ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::on_event(Job& job, const engine::RequestEvent& ev) {
  using Kind = engine::RequestEvent::Kind;
  const auto now = Clock::now();
  if (ev.kind == Kind::Token) {
    if (!job.first_token_seen) {
      job.first_token_seen = true;
      metrics_.observe_ttft(std::chrono::duration<double>(now - job.arrival).count());
    }
    auto& last = job.last_token[size_t(ev.choice)];
    if (last != Clock::time_point{}) metrics_.observe_inter_token(std::chrono::duration<double>(now - last).count());
    last = now;
  }
  const bool ends = ev.kind == Kind::Finished || ev.kind == Kind::Failed;
  if (ev.kind == Kind::Finished) {
    metrics_.add_tokens(ev.usage.prompt_tokens, ev.usage.cached_tokens, ev.usage.completion_tokens);
    metrics_.observe_e2e(std::chrono::duration<double>(now - job.arrival).count());
  }
  {
    std::lock_guard lock(job.mutex);
    job.events.push_back(ev);
    if (ends) job.ended = true;
  }
  job.ready.notify_one();
  if (ends) --in_flight_;
}

void EngineLoop::run() {
  std::vector<std::shared_ptr<Job>> submissions, cancellations;
  for (;;) {
    {
      std::unique_lock lock(inbox_mutex_);
      // Idle: sleep until something arrives. Busy: just pick up what is there between steps.
      if (scheduler_.idle())
        inbox_ready_.wait(lock, [&] { return stopping_ || !submissions_.empty() || !cancellations_.empty(); });
      if (stopping_) break;
      submissions.swap(submissions_);
      cancellations.swap(cancellations_);
    }
    for (auto& job : submissions) {
      job->last_token.assign(size_t(job->request.n), Clock::time_point{});
      Job* raw = job.get();
      // The sink owns a reference: the job lives while the scheduler may still report on it.
      job->id = scheduler_.submit(std::move(job->request),
                                  [this, raw, keep = job](const engine::RequestEvent& ev) { on_event(*raw, ev); });
    }
    submissions.clear();
    for (auto& job : cancellations) {
      bool ended;
      {
        std::lock_guard lock(job->mutex);
        ended = job->ended;
        job->ended = true;
      }
      if (ended) continue;
      scheduler_.cancel(job->id);
      --in_flight_;
      metrics_.request_failed("cancelled");
    }
    cancellations.clear();
    if (!scheduler_.idle()) {
      try {
        scheduler_.step();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "greta-vk serve: engine failure, failing the requests in flight: %s\n", e.what());
        scheduler_.fail_all(cat("engine failure: ", e.what()));
      }
    }
    publish_gauges();
  }
  scheduler_.fail_all("the server is shutting down");
  publish_gauges();
}

void EngineLoop::publish_gauges() {
  const engine::SchedulerStats s = scheduler_.stats();
  metrics_.set_gauges({s.waiting, s.running, s.kv_pages_running, s.kv_pages_retained, s.kv_pages_total});
}

}  // namespace greta::server
