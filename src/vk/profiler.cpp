#include "vk/profiler.h"

#include <algorithm>
#include <cstdio>

namespace greta::vk {

std::vector<DispatchTiming> timings_from_ticks(const std::vector<std::string>& labels, const uint64_t* ticks,
                                               uint32_t valid_bits, double period_ns) {
  std::vector<DispatchTiming> out;
  if (labels.empty() || valid_bits == 0) return out;
  const uint64_t mask = valid_bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << valid_bits) - 1;
  const uint64_t wrap = valid_bits >= 64 ? 0 : uint64_t(1) << valid_bits;
  const uint64_t base = ticks[0] & mask;
  // Ticks after `base` in counter order: a value below base means the counter wrapped once.
  auto since_base = [&](uint64_t t) -> uint64_t {
    t &= mask;
    return t >= base ? t - base : t + wrap - base;
  };
  for (size_t i = 0; i < labels.size(); ++i) {
    DispatchTiming t;
    t.label = labels[i];
    t.start_ns = double(since_base(ticks[2 * i])) * period_ns;
    t.end_ns = double(since_base(ticks[2 * i + 1])) * period_ns;
    out.push_back(std::move(t));
  }
  return out;
}

void Profiler::add(const std::vector<DispatchTiming>& timings) {
  for (const auto& t : timings) {
    Entry& e = entries_[t.label];
    const double d = t.duration_ns();
    if (e.count == 0) {
      e.label = t.label;
      e.min_ns = e.max_ns = d;
    }
    e.min_ns = std::min(e.min_ns, d);
    e.max_ns = std::max(e.max_ns, d);
    e.total_ns += d;
    ++e.count;
  }
}

std::vector<Profiler::Entry> Profiler::entries() const {
  std::vector<Entry> out;
  for (const auto& [label, e] : entries_) out.push_back(e);
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.total_ns > b.total_ns; });
  return out;
}

std::string Profiler::report() const {
  const auto rows = entries();
  double all = 0;
  for (const auto& e : rows) all += e.total_ns;
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %8s %12s %10s %10s %10s %6s\n", "operation", "count", "total ms", "mean us",
                "min us", "max us", "share");
  out += line;
  for (const auto& e : rows) {
    std::snprintf(line, sizeof line, "%-32.32s %8llu %12.3f %10.2f %10.2f %10.2f %5.1f%%\n", e.label.c_str(),
                  static_cast<unsigned long long>(e.count), e.total_ns / 1e6, e.mean_ns() / 1e3, e.min_ns / 1e3,
                  e.max_ns / 1e3, all > 0 ? 100.0 * e.total_ns / all : 0.0);
    out += line;
  }
  return out;
}

}  // namespace greta::vk
