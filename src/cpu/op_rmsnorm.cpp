// RMSNorm over rows: the sum of squares in fp64, then (x * scale) * weight in fp32 like ggml's rms_norm + mul.
#include <cmath>

#include "cpu/ops.h"

namespace greta::cpu {

void rmsnorm(ThreadPool& pool, const float* in, const float* weight, float* out, int64_t rows, int64_t width,
             float eps) {
  pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = in + r * width;
      float* y = out + r * width;  // may be x: every x[i] is read before y[i] is written below
      double sum_sq = 0;
      for (int64_t i = 0; i < width; ++i) sum_sq += double(x[i]) * double(x[i]);
      const float scale = float(1.0 / std::sqrt(sum_sq / double(width) + double(eps)));
      for (int64_t i = 0; i < width; ++i) y[i] = (x[i] * scale) * weight[i];
    }
  }, 8);
}

}  // namespace greta::cpu
