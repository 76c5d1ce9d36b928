// Legacy 32-weight block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (layouts in quant_blocks.h).
// Decoders feed 32 weights per block to a sink (see quants_internal.h). Quantizers follow ggml's reference
// quantizers (quantize_row_*_ref), which llama-quantize uses when no importance matrix is given: one absmax (or
// min/max) scale per block, stored as fp16, codes rounded with the unrounded f32 scale. Same arithmetic, same order,
// so our output is bit-identical to llama.cpp's files.
#include <cfloat>
#include <cmath>

#include "model/quant_blocks.h"
#include "model/quants_internal.h"

namespace greta::model::detail {

namespace {

// kBit[j] = 1 << j. Testing qh against a table of masks (rather than shifting qh by the loop index, a per-lane
// variable shift SSE2 lacks) lets the Q5 loops vectorize.
constexpr uint32_t kBit[16] = {1u << 0, 1u << 1, 1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
                               1u << 8, 1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15};

struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      float w[32];
      for (int j = 0; j < 16; ++j) {
        w[j] = float(int(b.qs[j] & 0x0F) - 8) * d;
        w[j + 16] = float(int(b.qs[j] >> 4) - 8) * d;
      }
      sink.put32(i * 32, w);
    }
  }
};

struct DecodeQ4_1 {
  using Block = BlockQ4_1;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      const float m = load_half(b.m);
      float w[32];
      for (int j = 0; j < 16; ++j) {
        w[j] = float(b.qs[j] & 0x0F) * d + m;
        w[j + 16] = float(b.qs[j] >> 4) * d + m;
      }
      sink.put32(i * 32, w);
    }
  }
};

struct DecodeQ5_0 {
  using Block = BlockQ5_0;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      const uint32_t qh = load_u32(b.qh), qh_hi = qh >> 16;
      float w[32];
      for (int j = 0; j < 16; ++j) {
        const int lo = int(b.qs[j] & 0x0F) | ((qh & kBit[j]) ? 16 : 0);
        const int hi = int(b.qs[j] >> 4) | ((qh_hi & kBit[j]) ? 16 : 0);
        w[j] = float(lo - 16) * d;
        w[j + 16] = float(hi - 16) * d;
      }
      sink.put32(i * 32, w);
    }
  }
};

struct DecodeQ5_1 {
  using Block = BlockQ5_1;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      const float m = load_half(b.m);
      const uint32_t qh = load_u32(b.qh), qh_hi = qh >> 16;
      float w[32];
      for (int j = 0; j < 16; ++j) {
        const int lo = int(b.qs[j] & 0x0F) | ((qh & kBit[j]) ? 16 : 0);
        const int hi = int(b.qs[j] >> 4) | ((qh_hi & kBit[j]) ? 16 : 0);
        w[j] = float(lo) * d + m;
        w[j + 16] = float(hi) * d + m;
      }
      sink.put32(i * 32, w);
    }
  }
};

struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      float w[32];
      for (int j = 0; j < 32; ++j) w[j] = float(b.qs[j]) * d;
      sink.put32(i * 32, w);
    }
  }
};

// Value of largest magnitude, sign kept (the first one on ties), as the absmax formats pick it.
float signed_absmax(const float* x, int n) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float& lo, float& hi) {
  lo = FLT_MAX;
  hi = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
}

}  // namespace

void dequantize_q4_0(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ4_0>(s, d, n); }
void dequantize_q4_1(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ4_1>(s, d, n); }
void dequantize_q5_0(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ5_0>(s, d, n); }
void dequantize_q5_1(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ5_1>(s, d, n); }
void dequantize_q8_0(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ8_0>(s, d, n); }
double dot_q4_0(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ4_0>(s, x, n); }
double dot_q4_1(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ4_1>(s, x, n); }
double dot_q5_0(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ5_0>(s, x, n); }
double dot_q5_1(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ5_1>(s, x, n); }
double dot_q8_0(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ8_0>(s, x, n); }

// Q4_0: d = (signed absmax) / -8, so the extreme weight maps to code 0 exactly; codes = trunc(x/d + 8.5), capped at 15.
void quantize_q4_0(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    const float d = signed_absmax(x, 32) / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_half(out[i].d, d);
    for (int j = 0; j < 16; ++j) {
      const int lo = trunc_clamp(x[j] * id + 8.5f, 15);
      const int hi = trunc_clamp(x[j + 16] * id + 8.5f, 15);
      out[i].qs[j] = uint8_t(lo | hi << 4);
    }
  }
}

// Q4_1: d = (max - min) / 15, m = min; codes = trunc((x - min)/d + 0.5), capped at 15.
void quantize_q4_1(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    float lo_v, hi_v;
    min_max(x, 32, lo_v, hi_v);
    const float d = (hi_v - lo_v) / 15.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_half(out[i].d, d);
    store_half(out[i].m, lo_v);
    for (int j = 0; j < 16; ++j) {
      const int lo = trunc_clamp((x[j] - lo_v) * id + 0.5f, 15);
      const int hi = trunc_clamp((x[j + 16] - lo_v) * id + 0.5f, 15);
      out[i].qs[j] = uint8_t(lo | hi << 4);
    }
  }
}

// Q5_0: as Q4_0 with 5-bit codes: d = (signed absmax) / -16, codes = trunc(x/d + 16.5) capped at 31.
void quantize_q5_0(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    const float d = signed_absmax(x, 32) / -16.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_half(out[i].d, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = trunc_clamp(x[j] * id + 16.5f, 31);
      const int hi = trunc_clamp(x[j + 16] * id + 16.5f, 31);
      out[i].qs[j] = uint8_t((lo & 0x0F) | (hi & 0x0F) << 4);
      qh |= uint32_t(lo >> 4) << j;
      qh |= uint32_t(hi >> 4) << (j + 16);
    }
    store_u32(out[i].qh, qh);
  }
}

// Q5_1: as Q4_1 with 5-bit codes: d = (max - min) / 31.
void quantize_q5_1(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    float lo_v, hi_v;
    min_max(x, 32, lo_v, hi_v);
    const float d = (hi_v - lo_v) / 31.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_half(out[i].d, d);
    store_half(out[i].m, lo_v);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = trunc_clamp((x[j] - lo_v) * id + 0.5f, 31);
      const int hi = trunc_clamp((x[j + 16] - lo_v) * id + 0.5f, 31);
      out[i].qs[j] = uint8_t((lo & 0x0F) | (hi & 0x0F) << 4);
      qh |= uint32_t(lo >> 4) << j;
      qh |= uint32_t(hi >> 4) << (j + 16);
    }
    store_u32(out[i].qh, qh);
  }
}

// Q8_0: d = absmax / 127; codes = round-half-away-from-zero(x / d) (C's roundf).
void quantize_q8_0(const float* x, void* dst, int64_t n_blocks) {
  auto* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    store_half(out[i].d, d);
    for (int j = 0; j < 32; ++j) {
      const float r = std::round(x[j] * id);
      // |r| <= 127 for finite input; the clamp only keeps NaN / Inf input from undefined conversions.
      out[i].qs[j] = int8_t(r >= 127.f ? 127 : r <= -127.f ? -127 : (r == r ? int(r) : 0));
    }
  }
}

}  // namespace greta::model::detail
