// The server's engine thread: the only thread that touches the Engine and its Scheduler. HTTP threads hand it jobs
// and cancellations through an inbox; it runs scheduler steps while there is work, and puts each job's events in
// the job's own queue, where the job's HTTP thread waits for them.
//
//   HTTP thread                         engine thread
//   submit(job) ──inbox──────────────▶  scheduler.submit(job.request)   ─┐
//   job.wait_events() ◀──job.events──── sink: push event, notify          │ step() while not idle
//   cancel(job) (client gone) ─inbox─▶  scheduler.cancel: pages freed    ─┘
//
// The loop also keeps the queue gauges of /metrics current and times first tokens and inter-token gaps there (the
// time an event is produced, not the time a slow client reads it).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "server/metrics.h"

namespace greta::server {

using Clock = std::chrono::steady_clock;

// One request's state, shared by its HTTP thread and the engine thread.
struct Job {
  engine::ScheduledRequest request;  // moved into the scheduler at submission
  Clock::time_point arrival = Clock::now();

  // Events produced for it, in order; `ended` once Finished or Failed is among them (or the server stopped it).
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<engine::RequestEvent> events;
  bool ended = false;

  // Engine thread only.
  engine::RequestId id = 0;
  bool first_token_seen = false;
  std::vector<Clock::time_point> last_token;  // per choice

  // Moves the queued events into `out` (waiting up to `timeout` for at least one). Returns false when the job ended
  // and nothing is left to read.
  bool take_events(std::deque<engine::RequestEvent>& out, std::chrono::milliseconds timeout);
};

class EngineLoop {
public:
  EngineLoop(engine::Engine& engine, const engine::SchedulerOptions& options, Metrics& metrics);
  ~EngineLoop();  // stop() if still running
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues the job unless `max_in_flight` jobs are already in flight (then false: the server answers 429).
  bool try_submit(std::shared_ptr<Job> job, int64_t max_in_flight);
  // The client is gone: the job's sequences are released on the engine thread's next turn.
  void cancel(std::shared_ptr<Job> job);
  // Jobs submitted and not yet ended (the bounded queue counts these).
  int64_t in_flight() const { return in_flight_.load(); }
  // Fails every job ("the server is shutting down") and joins the thread.
  void stop();

private:
  void run();
  void on_event(Job& job, const engine::RequestEvent& ev);
  void publish_gauges();  // the scheduler's queue and KV figures into /metrics

  engine::Engine& engine_;
  Metrics& metrics_;
  engine::Scheduler scheduler_;
  std::atomic<int64_t> in_flight_{0};

  std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::vector<std::shared_ptr<Job>> submissions_, cancellations_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace greta::server
