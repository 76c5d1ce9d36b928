// Helpers shared by the test suites: fixture paths and seeded random data (never zeros-only inputs).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace greta::test {

inline std::string shared_path(const std::string& rel) { return std::string(GRETA_SHARED_DIR) + "/" + rel; }

// Uniform floats in [lo, hi) from a fixed seed: reproducible, non-trivial inputs.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Normalised mean squared error: sum (a-b)^2 / sum b^2.
inline double nmse(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? num / den : num;
}

}  // namespace greta::test
