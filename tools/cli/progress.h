// Progress display for slow steps (loading a model), drawn on a terminal only: when the stream is not a TTY (piped,
// redirected, CI logs) every call is a no-op, so scripts see clean output.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace greta::cli {

// One line, redrawn in place with '\r': "loading stories260K.gguf [=========>          ]  45%  1.2/2.6 GiB".
// With total == 0 the amount is unknown and the line shows a spinner and the elapsed time instead.
class ProgressBar {
public:
  // Draws on `stream` only if it is a terminal (or `force`, for tests).
  explicit ProgressBar(std::string label, std::FILE* stream = stderr, bool force = false);
  ~ProgressBar();  // clears the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool active() const { return stream_ != nullptr; }
  void set_label(std::string label);
  // Redraws when something visible changed, at most every 50 ms (the last update always shows).
  void update(uint64_t done, uint64_t total);
  // Clears the line (idempotent); later updates draw again.
  void clear();

  // The line for a state, `width` columns at most (pure: tests check it).
  static std::string render(std::string_view label, uint64_t done, uint64_t total, double elapsed_s, int width);

private:
  void draw(uint64_t done, uint64_t total);

  std::string label_;
  std::FILE* stream_ = nullptr;  // null: inactive
  std::chrono::steady_clock::time_point start_, last_draw_{};
  bool drawn_ = false;
  int width_ = 80;
};

// The progress shown while a model loads: the file is read once through the page cache with a byte count (the engine
// memory-maps it right after and then finds it in memory, so this costs little and shows the disk-bound part of the
// load), then a ticking "preparing the backend" line while the weights go onto the backend. Inactive (and reads
// nothing) when stderr is not a terminal. Destroying it clears the line and stops the ticker.
class LoadProgress {
public:
  explicit LoadProgress(const std::string& model_path, std::FILE* stream = stderr);
  ~LoadProgress();
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

private:
  void tick_until_stopped(std::stop_token stop);

  ProgressBar bar_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::jthread ticker_;  // declared last: joined first on destruction
};

}  // namespace greta::cli
