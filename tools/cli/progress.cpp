#include "progress.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace greta::cli {

namespace {

constexpr auto kMinRedraw = std::chrono::milliseconds(50);
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr size_t kReadChunk = size_t(8) << 20;

int terminal_width(int fd) {
  winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 80;
}

// Physical memory in bytes (0 when unknown).
uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

ProgressBar::ProgressBar(std::string label, std::FILE* stream, bool force)
    : label_(std::move(label)), start_(std::chrono::steady_clock::now()) {
  if (stream && (force || isatty(fileno(stream)))) {
    stream_ = stream;
    width_ = force ? 80 : terminal_width(fileno(stream));
  }
}

ProgressBar::~ProgressBar() { clear(); }

void ProgressBar::set_label(std::string label) { label_ = std::move(label); }

std::string ProgressBar::render(std::string_view label, uint64_t done, uint64_t total, double elapsed_s, int width) {
  std::string tail;
  if (total > 0) {
    done = std::min(done, total);
    const double fraction = double(done) / double(total);
    tail = cat(" ", std::string(fraction < 0.1 ? 2 : fraction < 1 ? 1 : 0, ' '), int(fraction * 100), "%  ",
               format_bytes(double(done)), " / ", format_bytes(double(total)));
    // The bar takes what the label and the numbers leave (at most 40 columns, at least 10).
    const int bar_width = std::clamp(width - int(label.size()) - int(tail.size()) - 4, 10, 40);
    const int filled = int(fraction * bar_width);
    std::string bar(size_t(bar_width), ' ');
    std::fill_n(bar.begin(), filled, '=');
    if (filled < bar_width && done > 0) bar[size_t(filled)] = '>';
    tail = cat(" [", bar, "]", tail);
  } else {
    static constexpr char k_spinner[] = {'|', '/', '-', '\\'};
    char elapsed[32];
    std::snprintf(elapsed, sizeof elapsed, "%.1f s", elapsed_s);
    tail = cat(" ", k_spinner[size_t(elapsed_s * 10) % 4], " ", elapsed);
  }
  std::string line = cat(label, tail);
  if (int(line.size()) > width - 1) line.resize(size_t(std::max(width - 1, 0)));
  return line;
}

void ProgressBar::draw(uint64_t done, uint64_t total) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = render(label_, done, total, elapsed, width_);
  // "\r" + line + clear-to-end-of-line (ANSI EL), so a shorter line leaves no remnants.
  std::fprintf(stream_, "\r%s\x1b[K", line.c_str());
  std::fflush(stream_);
  drawn_ = true;
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!stream_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool finished = total > 0 && done >= total;
  if (drawn_ && !finished && now - last_draw_ < kMinRedraw) return;
  last_draw_ = now;
  draw(done, total);
}

void ProgressBar::clear() {
  if (!stream_ || !drawn_) return;
  std::fprintf(stream_, "\r\x1b[K");
  std::fflush(stream_);
  drawn_ = false;
}

LoadProgress::LoadProgress(const std::string& model_path, std::FILE* stream)
    : bar_(cat("loading ", std::filesystem::path(model_path).filename().string()), stream) {
  if (!bar_.active()) return;
  // Read the file through the page cache, unless it would not fit in memory anyway (then reading it now would only
  // push itself out again before the engine maps it). Errors are left for the engine to report.
  const int fd = ::open(model_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st {};
    const uint64_t size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0;
    const uint64_t memory = physical_memory();
    if (size > 0 && (memory == 0 || size < memory / 2)) {
      std::vector<char> buffer(kReadChunk);
      uint64_t done = 0;
      bar_.update(0, size);
      for (ssize_t n; done < size && (n = ::read(fd, buffer.data(), buffer.size())) > 0;) {
        done += uint64_t(n);
        bar_.update(done, size);
      }
    }
    ::close(fd);
  }
  bar_.set_label("preparing the backend");
  ticker_ = std::jthread([this](std::stop_token stop) { tick_until_stopped(stop); });
}

LoadProgress::~LoadProgress() {
  if (ticker_.joinable()) {
    ticker_.request_stop();
    ticker_.join();
  }
  bar_.clear();
}

void LoadProgress::tick_until_stopped(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    bar_.update(0, 0);
    wake_.wait_for(lock, stop, kTick, [] { return false; });
  }
}

}  // namespace greta::cli
