// K-quant quantizers: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, following ggml's reference quantizers (quantize_row_*_ref, which
// llama-quantize runs when no importance matrix is given). Each super-block is quantized in three steps:
//   1. every sub-block gets a float scale (and min) from an iterative search that minimizes a weighted error:
//      - search_scale_min (ggml's make_qkx2_quants) for the formats with mins (Q2_K, Q4_K, Q5_K): codes q in [0, nmax]
//        with w ~= scale * q - min; tries nstep+1 trial scales around nmax/(max-min), refits scale and min by weighted
//        least squares for each trial's codes, keeps the best;
//      - search_scale_symmetric (make_qx_quants) for Q6_K: signed codes in [-nmax, nmax), 18 trial scales around
//        -nmax/(signed absmax), weights x^2, keeps the one maximizing (sum w x q)^2 / sum w q^2;
//      - refine_scale_q3 (make_q3_quants) for Q3_K: start at -nmax/(signed absmax), then up to 5 passes of
//        coordinate descent on single codes;
//   2. the sub-block scales (mins) are quantized against the largest one into 4/6/8-bit codes, the super-block
//      scale(s) stored as fp16;
//   3. every weight is re-quantized with the scales as a decoder will see them (fp16 super-scale times code).
// All arithmetic is float, in ggml's operand order, rounding with nearest_int, so the output bytes match llama.cpp's
// (the choices in step 1 are sensitive to the last bit, which is why the order matters).
#include <cmath>
#include <cstring>

#include "model/quant_blocks.h"
#include "model/quants_internal.h"

namespace greta::model::detail {

namespace {

// Blocks whose values are all below this magnitude quantize to zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// make_qkx2_quants: codes L[i] in [0, nmax] for w ~= scale * L - min_out (min_out >= 0 is returned negated as in
// ggml: the value to subtract). use_mad selects |error| instead of error^2. laux is scratch of n bytes.
float search_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L, float& min_out,
                       uint8_t* laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    min_out = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    min_out = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {  // a positive offset is not representable (min is subtracted): refit the scale alone
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, laux, size_t(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  min_out = -min;
  return scale;
}

// make_qx_quants with rmse_type 1 and no importance weights (weights x^2): codes L[i] in [0, 2*nmax) holding
// q + nmax for w ~= scale * q.
float search_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants with do_rmse: signed codes refined one at a time (weights x^2); L[i] = q + nmax on return.
float refine_scale_q3(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * float(L[i]) * float(L[i]);
        const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 2-bit codes L[0..256) into Q2_K/Q3_K's interleaved qs[64] (weight e -> byte 32*(e/128) + e%32, shift
// 2*((e%128)/32)).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* c = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(c[0] | (c[32] << 2) | (c[64] << 4) | (c[96] << 6));
    }
}

// Packs Q4_K/Q5_K's 6-bit scale and min codes of sub-block s (see quant_blocks.h); scales[] must start zeroed for
// s >= 4 to OR into bytes written for s - 4.
void pack_scale_min_k4(uint8_t* scales, int s, uint8_t sc, uint8_t mn) {
  if (s < 4) {
    scales[s] = sc;
    scales[s + 4] = mn;
  } else {
    scales[s + 4] = uint8_t((sc & 0x0F) | ((mn & 0x0F) << 4));
    scales[s - 4] |= uint8_t((sc >> 4) << 6);
    scales[s] |= uint8_t((mn >> 4) << 6);
  }
}

// Shared by Q4_K and Q5_K: sub-block search (weights av_x + |x|), 6-bit scale/min codes, fp16 d/dmin, then
// requantized codes L[0..256) in [0, nmax].
void quantize_scales_mins_k(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* d_out,
                            uint8_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  uint8_t laux[32];
  float max_scale = 0, max_min = 0;  // scales are >= 0 as the min is subtracted
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = search_scale_min(32, nmax, xs, weights, L + 32 * j, mins[j], laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales_out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));
    uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    pack_scale_min_k4(scales_out, j, ls, lm);
  }
  store_half(d_out, max_scale / 63.f);
  store_half(dmin_out, max_min / 63.f);
  const float d_all = load_half(d_out), dmin_all = load_half(dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    unpack_scale_min_k4(scales_out, j, sc, mn);
    const float d = d_all * float(sc);
    if (d == 0.f) continue;  // keep the search's codes (they decode to -dm either way)
    const float dm = dmin_all * float(mn);
    for (int l = 0; l < 32; ++l) L[32 * j + l] = uint8_t(clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
  }
}

}  // namespace

void quantize_q2_k(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 256) {
    BlockQ2_K& b = out[i];
    uint8_t L[256], laux[16];
    float weights[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = search_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, mins[j], laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    // 4-bit scale (low nibble) and min (high nibble) codes relative to the largest of each.
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      store_half(b.d, max_scale / 15.f);
    } else {
      for (int j = 0; j < 16; ++j) b.scales[j] = 0;
      store_half(b.d, 0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(b.scales[j] | (nearest_int(iscale * mins[j]) << 4));
      store_half(b.dmin, max_min / 15.f);
    } else {
      store_half(b.dmin, 0.f);
    }
    const float d_all = load_half(b.d), dmin_all = load_half(b.dmin);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(b.scales[j] & 0x0F);
      if (d == 0.f) continue;
      const float dm = dmin_all * float(b.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) L[16 * j + l] = uint8_t(clamp_int(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
    }
    pack_2bit(L, b.qs);
  }
}

void quantize_q3_k(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 256) {
    BlockQ3_K& b = out[i];
    int8_t L[256];
    float scales[16];
    float max_scale = 0, amax = 0;  // the sub-block scale of largest magnitude, sign kept
    for (int j = 0; j < 16; ++j) {
      scales[j] = refine_scale_q3(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    // 6-bit signed scale codes: code = clamp(round(-32 * scale / max_scale), -32, 31) + 32.
    std::memset(b.scales, 0, 12);
    if (max_scale != 0) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int8_t l = int8_t(nearest_int(iscale * scales[j]));
        l = int8_t(clamp_int(l, -32, 31) + 32);
        if (j < 8)
          b.scales[j] = uint8_t(l & 0x0F);
        else
          b.scales[j - 8] |= uint8_t((l & 0x0F) << 4);
        l = int8_t(l >> 4);
        b.scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
      }
      store_half(b.d, 1 / iscale);
    } else {
      store_half(b.d, 0.f);
    }
    const float d_all = load_half(b.d);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(unpack_scale_q3_k(b.scales, j) - 32);
      if (d == 0.f) continue;
      for (int l = 0; l < 16; ++l) L[16 * j + l] = int8_t(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
    }
    // Split the 3-bit codes: high bit into hmask (weight e -> bit e/32 of hmask[e%32]), low 2 bits into qs.
    std::memset(b.hmask, 0, 32);
    uint8_t low[256];
    for (int e = 0; e < 256; ++e) {
      uint8_t v = uint8_t(L[e]);
      if (v > 3) {
        b.hmask[e % 32] |= uint8_t(1u << (e / 32));
        v = uint8_t(v - 4);
      }
      low[e] = v;
    }
    pack_2bit(low, b.qs);
  }
}

void quantize_q4_k(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 256) {
    BlockQ4_K& b = out[i];
    uint8_t L[256];
    quantize_scales_mins_k(x, 15, -1.f, 0.1f, 20, b.d, b.dmin, b.scales, L);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 256) {
    BlockQ5_K& b = out[i];
    uint8_t L[256];
    quantize_scales_mins_k(x, 31, -0.5f, 0.1f, 15, b.d, b.dmin, b.scales, L);
    std::memset(b.qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        if (lo > 15) {
          lo -= 16;
          b.qh[l] |= uint8_t(1u << (2 * c));
        }
        if (hi > 15) {
          hi -= 16;
          b.qh[l] |= uint8_t(2u << (2 * c));
        }
        b.qs[32 * c + l] = uint8_t(lo | (hi << 4));
      }
    }
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 256) {
    BlockQ6_K& b = out[i];
    int8_t L[256];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = search_scale_symmetric(16, 32, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > max_abs_scale) {
        max_abs_scale = a;
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&b, 0, sizeof b);
      continue;
    }
    // 8-bit signed scale codes: round(-128 * scale / max_scale), capped at 127.
    const float iscale = -128.f / max_scale;
    store_half(b.d, 1 / iscale);
    for (int j = 0; j < 16; ++j) {
      const int v = nearest_int(iscale * scales[j]);
      b.scales[j] = int8_t(v < 127 ? v : 127);
    }
    const float d_all = load_half(b.d);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(b.scales[j]);
      if (d == 0.f) continue;
      for (int l = 0; l < 16; ++l) L[16 * j + l] = int8_t(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
    }
    // 6-bit codes: low nibbles into ql, top 2 bits into qh (layout in quant_blocks.h).
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = b.ql + 64 * h;
      uint8_t* qh = b.qh + 32 * h;
      const int8_t* c = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = c[l], q1 = c[l + 32], q2 = c[l + 64], q3 = c[l + 96];
        ql[l] = uint8_t((q0 & 0x0F) | ((q2 & 0x0F) << 4));
        ql[l + 32] = uint8_t((q1 & 0x0F) | ((q3 & 0x0F) << 4));
        qh[l] = uint8_t((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
      }
    }
  }
}

}  // namespace greta::model::detail
