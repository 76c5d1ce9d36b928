// Internals shared by the codec files (quants.cpp, quants_legacy.cpp, quants_k.cpp, quants_k_quantize.cpp,
// quants_lut.cpp, quants_lut_quantize.cpp); not a
// public header. Holds the inline scalar helpers, the two "sinks" every block decoder feeds, and the per-type entry
// points the dispatcher in quants.cpp calls.
//
// Decoder design: each type has one decoder, a template over a Sink, that turns blocks into weights 32 at a time
// (sink.put32(first_index, w[32])). StoreSink writes them to the output row (dequantize_row); DotSink multiplies them
// by x and accumulates (dot_row). Both paths therefore compute each weight with the very same expression, so
// dot_row(row, x) equals the dot product of dequantize_row(row) with x up to summation order. After inlining,
// w[32] lives in registers and both loops are plain fixed-length loops GCC/Clang vectorize (no per-element calls).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

#include "core/half.h"

namespace greta::model::detail {

// fp16 -> fp32 for the hot loops, bit-identical to greta::fp16_to_fp32 (tested on all 65536 inputs) but inline and
// branch-free, so loops over halves vectorize: the exponent/mantissa bits are shifted into float position, which
// reads as the half's magnitude times 2^-112 for normal and subnormal halves alike (a subnormal half lands on a float
// subnormal; the product is exact), and a multiply by 2^112 rebiases; an all-ones exponent (Inf/NaN) is built
// directly and chosen with a bit mask (with a ?: GCC moves the float multiply into a branch, and a branch holding a
// float op cannot be if-converted, so the loop would not vectorize).
// Caveat: under denormals-are-zero (only set by -ffast-math start-up code, which GRETA does not use) subnormal halves
// would decode to 0.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp_mant = uint32_t(h & 0x7fffu) << 13;
  const uint32_t finite = std::bit_cast<uint32_t>(std::bit_cast<float>(exp_mant) * 0x1p112f);
  const uint32_t inf_nan = exp_mant | 0x7f800000u;  // all-ones exponent, payload kept
  const uint32_t is_inf_nan = 0u - uint32_t((exp_mant & 0x0f800000u) == 0x0f800000u);  // all ones or zero
  const uint32_t bits = (inf_nan & is_inf_nan) | (finite & ~is_inf_nan);
  return std::bit_cast<float>(sign | bits);
}

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline float load_half(const uint8_t* p) { return half_to_float(load_u16(p)); }
inline void store_half(uint8_t* p, float f) { store_u16(p, fp32_to_fp16(f)); }

// Round to nearest, ties to even, through the float adder: adding 1.5 * 2^23 leaves the rounded integer in the low
// mantissa bits. This is the rounding ggml's K-quant search uses (so our choices match its files); valid for
// |f| <= 2^22 - 1, and for anything else (huge, Inf, NaN) it returns some int without undefined behaviour.
inline int nearest_int(float f) {
  const float biased = f + 12582912.f;
  return int(std::bit_cast<uint32_t>(biased) & 0x007fffffu) - 0x00400000;
}

// (int)v clamped to [0, hi] without undefined behaviour for NaN / out-of-range v (NaN -> 0). For the legacy
// quantizers, whose codes are (int)(x * id + 0.5 or + offset): C's truncation, then the cap ggml applies.
inline int trunc_clamp(float v, int hi) {
  if (!(v > 0.f)) return 0;
  if (v >= float(hi)) return hi;
  return int(v);
}

// ---- sinks ---------------------------------------------------------------------------------------------------------

struct StoreSink {
  float* dst;
  void put32(int64_t at, const float* w) {
    float* out = dst + at;
    for (int l = 0; l < 32; ++l) out[l] = w[l];
  }
};

// Accumulation of dot_row: 32 float lanes (lane l sums w[at + l] * x[at + l] over groups), folded into a double every
// kFoldGroups groups (8192 weights) and at the end. So each float partial sums at most 256 products, and the
// vectorizable lane loop needs no reassociation of a single accumulator.
struct DotSink {
  static constexpr int kFoldGroups = 256;
  const float* x;
  float lanes[32] = {};
  double total = 0;
  int groups = 0;

  void put32(int64_t at, const float* w) {
    const float* xs = x + at;
    for (int l = 0; l < 32; ++l) lanes[l] += w[l] * xs[l];
    if (++groups == kFoldGroups) fold();
  }
  void fold() {
    double s = 0;
    for (int l = 0; l < 32; ++l) {
      s += lanes[l];
      lanes[l] = 0.f;
    }
    total += s;
    groups = 0;
  }
  double result() {
    fold();
    return total;
  }
};

// Runs Decoder::decode(blocks, n_blocks, sink) for both sinks. Decoder is a struct with a `Block` type and a static
// template `decode`.
template <class Decoder>
void dequantize_blocks(const void* src, float* dst, int64_t n_blocks) {
  StoreSink sink{dst};
  Decoder::decode(static_cast<const typename Decoder::Block*>(src), n_blocks, sink);
}
template <class Decoder>
double dot_blocks(const void* src, const float* x, int64_t n_blocks) {
  DotSink sink{x};
  Decoder::decode(static_cast<const typename Decoder::Block*>(src), n_blocks, sink);
  return sink.result();
}

// ---- per-type entry points (n_blocks whole blocks; the dispatcher validated everything) ----------------------------

// quants_legacy.cpp
void dequantize_q4_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_1(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_1(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_0(const void* src, float* dst, int64_t n_blocks);
double dot_q4_0(const void* src, const float* x, int64_t n_blocks);
double dot_q4_1(const void* src, const float* x, int64_t n_blocks);
double dot_q5_0(const void* src, const float* x, int64_t n_blocks);
double dot_q5_1(const void* src, const float* x, int64_t n_blocks);
double dot_q8_0(const void* src, const float* x, int64_t n_blocks);
void quantize_q4_0(const float* src, void* dst, int64_t n_blocks);
void quantize_q4_1(const float* src, void* dst, int64_t n_blocks);
void quantize_q5_0(const float* src, void* dst, int64_t n_blocks);
void quantize_q5_1(const float* src, void* dst, int64_t n_blocks);
void quantize_q8_0(const float* src, void* dst, int64_t n_blocks);

// quants_k.cpp
void dequantize_q2_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q3_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_k(const void* src, float* dst, int64_t n_blocks);
void dequantize_q6_k(const void* src, float* dst, int64_t n_blocks);
double dot_q2_k(const void* src, const float* x, int64_t n_blocks);
double dot_q3_k(const void* src, const float* x, int64_t n_blocks);
double dot_q4_k(const void* src, const float* x, int64_t n_blocks);
double dot_q5_k(const void* src, const float* x, int64_t n_blocks);
double dot_q6_k(const void* src, const float* x, int64_t n_blocks);

// quants_k_quantize.cpp
void quantize_q2_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q3_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q4_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q5_k(const float* src, void* dst, int64_t n_blocks);
void quantize_q6_k(const float* src, void* dst, int64_t n_blocks);

// quants_lut.cpp (table formats)
void dequantize_iq4_nl(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n_blocks);
void dequantize_mxfp4(const void* src, float* dst, int64_t n_blocks);
double dot_iq4_nl(const void* src, const float* x, int64_t n_blocks);
double dot_iq4_xs(const void* src, const float* x, int64_t n_blocks);
double dot_mxfp4(const void* src, const float* x, int64_t n_blocks);

// quants_lut_quantize.cpp
void quantize_iq4_nl(const float* src, void* dst, int64_t n_blocks);
void quantize_iq4_xs(const float* src, void* dst, int64_t n_blocks);
void quantize_mxfp4(const float* src, void* dst, int64_t n_blocks);

}  // namespace greta::model::detail
