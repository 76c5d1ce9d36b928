// GPU timing: per-operation timestamps of a RecordedSequence (commands.h) and a Profiler that aggregates them by
// name across submissions. Timestamps are written at the top and the bottom of the pipe around each dispatch, copy
// and fill, read back as 64-bit ticks, masked to the queue's timestampValidBits and converted with timestampPeriod.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace greta::vk {

struct DispatchTiming {
  std::string label;
  double start_ns = 0;  // relative to the first timed operation of the submission
  double end_ns = 0;
  double duration_ns() const { return end_ns - start_ns; }
};

// ticks holds 2 values (start, end) per label, as read from the query pool. Handles counters narrower than 64 bits
// (including one wrap-around within the submission).
std::vector<DispatchTiming> timings_from_ticks(const std::vector<std::string>& labels, const uint64_t* ticks,
                                               uint32_t valid_bits, double period_ns);

class Profiler {
public:
  struct Entry {
    std::string label;
    uint64_t count = 0;
    double total_ns = 0, min_ns = 0, max_ns = 0;
    double mean_ns() const { return count ? total_ns / double(count) : 0.0; }
  };

  void add(const std::vector<DispatchTiming>& timings);
  std::vector<Entry> entries() const;  // by total time, largest first
  std::string report() const;          // a table: label, count, total, mean, min, max, share
  void clear() { entries_.clear(); }

private:
  std::map<std::string, Entry> entries_;
};

}  // namespace greta::vk
