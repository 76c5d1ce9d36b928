// A timeline of one run in Chrome's trace-event format (open the file in chrome://tracing or ui.perfetto.dev):
// host spans (each step's execute, the logits read-back) on one track, and per-op device spans on another, from the
// backend's profiling (GPU timestamps on Vulkan/HIP, wall clock on the CPU). Device times are placed on the host
// clock at the submission that produced them, so the two tracks line up to within the submission latency.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace greta::engine {

class Trace {
public:
  using Clock = std::chrono::steady_clock;
  enum class Track { host = 1, device = 2 };

  Trace() : origin_(Clock::now()) {}
  // A span in nanoseconds of Clock's epoch (ns_since_epoch() of a Clock::time_point).
  void span(Track track, std::string name, std::string category, int64_t start_ns, int64_t end_ns);
  void host_span(std::string name, Clock::time_point start, Clock::time_point end) {
    span(Track::host, std::move(name), "host", ns(start), ns(end));
  }
  size_t size() const { return events_.size(); }
  // Writes {"traceEvents": [...]} with microsecond times relative to the trace's creation. Throws on I/O errors.
  void write(const std::string& path) const;

  static int64_t ns(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }

private:
  struct Event {
    Track track;
    std::string name, category;
    int64_t start_ns, end_ns;
  };
  Clock::time_point origin_;
  std::vector<Event> events_;
};

}  // namespace greta::engine
