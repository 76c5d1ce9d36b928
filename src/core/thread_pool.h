// A small fixed-size thread pool (the CPU backend's ops; the scheduler's sampling). parallel_for splits [0, n) into size() contiguous chunks, one
// per thread (the calling thread takes chunk 0), and waits for all of them. The ops give every output element to
// exactly one chunk and never reduce across chunks, so results do not depend on the thread count.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace greta {

class ThreadPool {
public:
  // n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // fn(begin, end, chunk_index) for each non-empty chunk. At most n / min_per_chunk chunks are made (tiny jobs run
  // on the calling thread alone). An exception thrown by any chunk is rethrown here (the first one, after every
  // chunk has finished).
  using ChunkFn = std::function<void(int64_t begin, int64_t end, int chunk)>;
  void parallel_for(int64_t n, const ChunkFn& fn, int64_t min_per_chunk = 1);

private:
  void worker_loop(int index);
  void run_chunk(int chunk);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  const ChunkFn* job_ = nullptr;  // valid while a parallel_for is in flight
  int64_t job_n_ = 0;
  int64_t job_parts_ = 1;
  uint64_t generation_ = 0;       // bumped per job so workers see each job once
  int pending_ = 0;               // workers still running the current job
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace greta
