// One thread that runs one backend's work in the order it was posted: how a layer split (split_backend.h) keeps
// each of its devices busy while the caller goes on to post the next pass to the others. Every call into that
// backend goes through its queue while work is in flight, so a backend is never called from two threads at once.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace greta::engine {

class DeviceQueue {
public:
  DeviceQueue();
  ~DeviceQueue();  // runs what is posted, then joins
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  // Runs `job` on the queue's thread after every job posted before it. After a job throws, the later ones are
  // dropped (destroyed unrun) until wait_idle() reports the error.
  void post(std::function<void()> job);
  // Waits until every posted job has run; rethrows the first exception one of them threw since the last call.
  void wait_idle();

private:
  void run();

  std::mutex mutex_;
  std::condition_variable work_, idle_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace greta::engine
