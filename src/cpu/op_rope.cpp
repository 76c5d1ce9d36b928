// Rotary position embedding, in place. For pair i < rope_dims/2 of a head at position p:
//   theta = p * freq_scale * base^(-2i / rope_dims) / freq_factors[i]     (factors optional: 1)
//   (a, b) <- m (a cos theta - b sin theta, a sin theta + b cos theta),   m = attn_factor
// With YaRN (ext_factor != 0) theta blends the scaled and unscaled angles by YaRN's ramp and m grows by
// 1 + 0.1 ln(1 / freq_scale) (engine::RopeOp).
// where (a, b) = (x[2i], x[2i+1]) for Adjacent pairing (llama) or (x[i], x[i + rope_dims/2]) for NeoxHalves
// (qwen2/qwen3). Dimensions from rope_dims to head_dim (partial rotary) pass through. Angles and rotation in fp64.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/ops.h"

namespace greta::cpu {

void rope(ThreadPool& pool, float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          int64_t rope_dims, model::RopePairing pairing, float base, float freq_scale, const float* freq_factors,
          const RopeYarn& yarn) {
  const int64_t half = rope_dims / 2;
  // Inverse frequencies are the same for every token: base^(-2i / rope_dims) / factor_i.
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[size_t(i)] = std::pow(double(base), -2.0 * double(i) / double(rope_dims)) /
                          (freq_factors ? double(freq_factors[i]) : 1.0);
  const bool adjacent = pairing == model::RopePairing::Adjacent;
  // YaRN: per pair, the share of the unscaled angle; and the magnitude factor.
  std::vector<double> mix(static_cast<size_t>(half), 0.0);
  double mscale = double(yarn.attn_factor);
  if (yarn.ext_factor != 0.f) {
    for (int64_t i = 0; i < half; ++i) {
      const double y = (double(i) - double(yarn.low)) / std::max(0.001, double(yarn.high) - double(yarn.low));
      mix[size_t(i)] = (1.0 - std::min(1.0, std::max(0.0, y))) * double(yarn.ext_factor);
    }
    mscale *= 1.0 + 0.1 * std::log(1.0 / double(freq_scale));
  }

  pool.parallel_for(n_tokens * n_heads, [&](int64_t begin, int64_t end, int) {
    std::vector<double> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
    int64_t cached_token = -1;
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / n_heads;
      if (t != cached_token) {  // angles depend on the token's position only
        for (int64_t i = 0; i < half; ++i) {
          const double extrap = double(positions[t]) * inv_freq[size_t(i)];
          const double interp = double(freq_scale) * extrap;
          const double theta = interp * (1.0 - mix[size_t(i)]) + extrap * mix[size_t(i)];
          cos_t[size_t(i)] = std::cos(theta) * mscale;
          sin_t[size_t(i)] = std::sin(theta) * mscale;
        }
        cached_token = t;
      }
      float* h = x + th * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        float* pa = adjacent ? h + 2 * i : h + i;
        float* pb = adjacent ? h + 2 * i + 1 : h + i + half;
        const double a = *pa, b = *pb, c = cos_t[size_t(i)], s = sin_t[size_t(i)];
        *pa = float(a * c - b * s);
        *pb = float(a * s + b * c);
      }
    }
  }, 4);
}

}  // namespace greta::cpu
