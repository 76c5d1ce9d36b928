// Quantizers of the table formats IQ4_NL, IQ4_XS and MXFP4 (layouts in quant_blocks.h). These are GRETA's own, made
// for `greta-vk synth` and the tests; they need not (and do not always) produce llama-quantize's bytes, only a low
// error (quants_test.cpp bounds it):
//   IQ4_NL / IQ4_XS  per 32 weights a weighted least-squares scale search (weights x^2, as ggml's search without an
//                    importance matrix uses): candidate scales put the block's largest-magnitude weight on or near
//                    either end of the table (-127 + t or 113 + t, |t| <= 7); each candidate's nearest codes give the
//                    optimal scale for those codes, and the candidate explaining the most of sum w x^2 wins. IQ4_NL
//                    stores that scale as fp16 and picks the codes again against the stored scale. IQ4_XS stores
//                    d = -(largest sub-block scale) / 32 as fp16 and per sub-block the 6-bit code l (scale d * (l - 32)):
//                    the nearest one or a neighbour, whichever gives the least squared error.
//   MXFP4            the E8M0 exponent floor(log2(absmax)) - 2 (ggml's choice: the largest E2M1 magnitude, 6, times
//                    2^that covers absmax up to 1.5 * 2^floor(log2 absmax); larger weights clip); each code is the
//                    nearest table value (ties to the smaller magnitude), ggml's rule (quantize_row_mxfp4_ref).
#include <algorithm>
#include <cmath>

#include "model/quant_blocks.h"
#include "model/quants_internal.h"

namespace greta::model::detail {

namespace {

// Index of the kIq4nlValues entry nearest to v (ties to the larger entry; NaN -> 0). The table is ascending.
int nearest_iq4(float v) {
  int idx = 0;
  for (int k = 0; k < 15; ++k) idx += (0.5f * float(kIq4nlValues[k] + kIq4nlValues[k + 1]) <= v) ? 1 : 0;
  return idx;
}

// Code (0..15) of the kMxfp4Values entry nearest to v: magnitude index among 0, 1, 2, 3, 4, 6, 8, 12 (ties to the
// smaller magnitude), sign bit 3 for negative values (zero always as code 0).
int nearest_mxfp4(float v) {
  constexpr float kMid[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.f, 7.f, 10.f};
  const float a = std::fabs(v);
  int idx = 0;
  for (float m : kMid) idx += a > m ? 1 : 0;
  return idx != 0 && v < 0.f ? idx + 8 : idx;
}

// The weighted least-squares scale of one block of 32 (see the file comment); 0 for an all-(near-)zero block.
float iq4_block_scale(const float* x) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (!(amax >= 1e-15f) || !std::isfinite(amax)) return 0.f;
  float best_d = 0.f, best = 0.f;  // best: sumqx^2 / sumq2 of the winning candidate (the error it removes)
  for (int end : {int(kIq4nlValues[0]), int(kIq4nlValues[15])})
    for (int t = -7; t <= 7; ++t) {
      const float id = float(end + t) / max;
      float sumqx = 0.f, sumq2 = 0.f;
      for (int j = 0; j < 32; ++j) {
        const float q = float(kIq4nlValues[nearest_iq4(id * x[j])]);
        const float w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0.f && sumqx * sumqx > best * sumq2) {
        best_d = sumqx / sumq2;
        best = best_d * sumqx;
      }
    }
  return best_d;
}

// Codes of 32 weights against the scale dl (stored as IQ4_NL's and IQ4_XS's qs: lo -> j, hi -> j + 16), and their
// squared error.
float iq4_codes(const float* x, float dl, uint8_t* qs) {
  const float id = dl != 0.f ? 1.f / dl : 0.f;
  float err = 0.f;
  uint8_t c[32];
  for (int j = 0; j < 32; ++j) {
    c[j] = uint8_t(dl != 0.f ? nearest_iq4(x[j] * id) : 8);  // 8: table value 1, times 0
    const float e = x[j] - dl * float(kIq4nlValues[c[j]]);
    err += e * e;
  }
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(c[j] | (c[j + 16] << 4));
  return err;
}

}  // namespace

void quantize_iq4_nl(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    store_half(out[i].d, iq4_block_scale(x));
    iq4_codes(x, load_half(out[i].d), out[i].qs);
  }
}

void quantize_iq4_xs(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 256) {
    BlockIQ4_XS& b = out[i];
    float scales[8], max_scale = 0.f;
    for (int s = 0; s < 8; ++s) {
      scales[s] = iq4_block_scale(x + 32 * s);
      if (std::fabs(scales[s]) > std::fabs(max_scale)) max_scale = scales[s];
    }
    store_half(b.d, -max_scale / 32.f);
    const float d = load_half(b.d);
    const float id = d != 0.f ? 1.f / d : 0.f;
    uint16_t scales_h = 0;
    for (int s = 0; s < 8; ++s) {
      const int l0 = std::max(-32, std::min(31, nearest_int(scales[s] * id)));
      int best_l = l0;
      float best_err = INFINITY;
      uint8_t qs[16];
      for (int l = std::max(-32, l0 - 1); l <= std::min(31, l0 + 1); ++l) {
        const float err = iq4_codes(x + 32 * s, d * float(l), qs);
        if (err < best_err) best_err = err, best_l = l;
      }
      iq4_codes(x + 32 * s, d * float(best_l), b.qs + 16 * s);
      const int code = best_l + 32;
      if (s % 2 == 0)
        b.scales_l[s / 2] = uint8_t(code & 0x0F);
      else
        b.scales_l[s / 2] |= uint8_t((code & 0x0F) << 4);
      scales_h |= uint16_t((code >> 4) << (2 * s));
    }
    store_u16(b.scales_h, scales_h);
  }
}

void quantize_mxfp4(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]);
    const float e = amax > 0.f ? std::floor(std::log2(amax)) - 2.f + 127.f : 0.f;
    const uint8_t code = uint8_t(e >= 254.f ? 254 : e > 0.f ? int(e) : 0);  // Inf -> 254; tiny / zero -> 0
    out[i].e = code;
    const float d = e8m0_to_float_half(code);
    for (int j = 0; j < 16; ++j) {
      const int lo = nearest_mxfp4(x[j] / d), hi = nearest_mxfp4(x[j + 16] / d);
      out[i].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

}  // namespace greta::model::detail
