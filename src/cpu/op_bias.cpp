// Bias add (qwen2's Q/K/V projections): x[r, :] += bias.
#include "cpu/ops.h"

namespace greta::cpu {

void add_bias(ThreadPool& pool, float* x, const float* bias, int64_t rows, int64_t width) {
  pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < width; ++i) x[r * width + i] += bias[i];
  }, 16);
}

}  // namespace greta::cpu
