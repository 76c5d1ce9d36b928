#include "core/thread_pool.h"

#include <algorithm>
#include <utility>

namespace greta {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(size_t(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int chunk) {
  const int64_t parts = job_parts_;
  if (chunk >= parts) return;
  const int64_t begin = job_n_ * chunk / parts, end = job_n_ * (chunk + 1) / parts;
  if (begin >= end) return;
  try {
    (*job_)(begin, end, chunk);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::parallel_for(int64_t n, const ChunkFn& fn, int64_t min_per_chunk) {
  if (n <= 0) return;
  const int64_t parts = std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_chunk)));
  if (parts == 1) {  // nothing to share: skip the wake-up round trip
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    error_ = nullptr;
    pending_ = int(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  run_chunk(0);
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_chunk(index);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace greta
