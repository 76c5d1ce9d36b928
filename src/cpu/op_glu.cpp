// Gated linear units, elementwise (engine::GluOp), in fp64:
//   SiLU       out = silu(g) * u                         silu(g) = g / (1 + e^-g)
//   GeluTanh   out = gelu(g) * u                         gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2)))
//   SwiGluOai  x = min(g, limit), y = clamp(u, -limit, limit), out = x / (1 + e^(-alpha x)) * (y + 1)
// ggml evaluates GELU through an f16 table; the exact formula differs from it by at most ~1e-3 relative, inside
// the golden tolerances.
#include <algorithm>
#include <cmath>

#include "cpu/ops.h"

namespace greta::cpu {

namespace {

double glu_value(engine::GluKind kind, double g, double u, double alpha, double limit) {
  switch (kind) {
    case engine::GluKind::SiLU: return g / (1.0 + std::exp(-g)) * u;
    case engine::GluKind::GeluTanh: {
      constexpr double kSqrt2OverPi = 0.79788456080286535588;
      return 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * g * (1.0 + 0.044715 * g * g))) * u;
    }
    case engine::GluKind::SwiGluOai: {
      const double x = std::min(g, limit), y = std::clamp(u, -limit, limit);
      return x / (1.0 + std::exp(-alpha * x)) * (y + 1.0);
    }
  }
  return 0;
}

}  // namespace

void glu(ThreadPool& pool, engine::GluKind kind, const float* gate, const float* up, float* out, int64_t n,
         float alpha, float limit) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = float(glu_value(kind, double(gate[i]), double(up[i]), double(alpha), double(limit)));
  }, 1024);
}

}  // namespace greta::cpu
