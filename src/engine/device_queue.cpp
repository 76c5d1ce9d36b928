#include "engine/device_queue.h"

#include <utility>

namespace greta::engine {

DeviceQueue::DeviceQueue() : thread_([this] { run(); }) {}

DeviceQueue::~DeviceQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void DeviceQueue::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  work_.notify_one();
}

void DeviceQueue::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void DeviceQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    const bool failed = error_ != nullptr;
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    if (!failed) {
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
    }
    job = nullptr;  // what it holds (a promise another queue waits on) is released before the queue looks idle
    lock.lock();
    busy_ = false;
    if (error && !error_) error_ = error;
    if (jobs_.empty()) idle_.notify_all();
  }
}

}  // namespace greta::engine
