// Residual add: x += y.
#include "cpu/ops.h"

namespace greta::cpu {

void add(ThreadPool& pool, float* x, const float* y, int64_t n) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) x[i] += y[i];
  }, 4096);
}

}  // namespace greta::cpu
