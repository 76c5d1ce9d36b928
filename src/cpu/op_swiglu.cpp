// SwiGLU: out = silu(gate) * up with silu(g) = g / (1 + e^-g) evaluated in fp64.
#include <cmath>

#include "cpu/ops.h"

namespace greta::cpu {

void swiglu(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const double g = gate[i];
      out[i] = float(g / (1.0 + std::exp(-g))) * up[i];
    }
  }, 1024);
}

}  // namespace greta::cpu
