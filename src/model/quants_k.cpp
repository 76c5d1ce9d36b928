// K-quant decoders: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256-weight super-blocks; layouts in quant_blocks.h).
// Each decoder emits its super-block as eight runs of 32 consecutive weights, which is the natural unit of every
// K layout (one Q4_K/Q5_K sub-block; two Q2_K/Q3_K/Q6_K sub-blocks of 16 sharing the same code bytes). Weights are
// computed with the same expressions and operand order as ggml's dequantize_row_* so the values are bit-identical.
#include "model/quant_blocks.h"
#include "model/quants_internal.h"

namespace greta::model::detail {

namespace {

struct DecodeQ2_K {
  using Block = BlockQ2_K;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      const float dmin = load_half(b.dmin);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* q = b.qs + 32 * h;
        for (int k = 0; k < 4; ++k) {
          const int shift = 2 * k;
          const int s = 8 * h + 2 * k;  // sub-blocks s (weights l < 16) and s + 1 (l >= 16)
          const float dl0 = d * float(b.scales[s] & 0x0F), ml0 = dmin * float(b.scales[s] >> 4);
          const float dl1 = d * float(b.scales[s + 1] & 0x0F), ml1 = dmin * float(b.scales[s + 1] >> 4);
          float w[32];
          for (int l = 0; l < 16; ++l) w[l] = dl0 * float((q[l] >> shift) & 3) - ml0;
          for (int l = 16; l < 32; ++l) w[l] = dl1 * float((q[l] >> shift) & 3) - ml1;
          sink.put32(i * 256 + 128 * h + 32 * k, w);
        }
      }
    }
  }
};

struct DecodeQ3_K {
  using Block = BlockQ3_K;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* q = b.qs + 32 * h;
        for (int k = 0; k < 4; ++k) {
          const int shift = 2 * k;
          const uint8_t high_bit = uint8_t(1u << (4 * h + k));
          const int s = 8 * h + 2 * k;
          const float dl0 = d * float(unpack_scale_q3_k(b.scales, s) - 32);
          const float dl1 = d * float(unpack_scale_q3_k(b.scales, s + 1) - 32);
          float w[32];
          for (int l = 0; l < 16; ++l)
            w[l] = dl0 * float(int((q[l] >> shift) & 3) - ((b.hmask[l] & high_bit) ? 0 : 4));
          for (int l = 16; l < 32; ++l)
            w[l] = dl1 * float(int((q[l] >> shift) & 3) - ((b.hmask[l] & high_bit) ? 0 : 4));
          sink.put32(i * 256 + 128 * h + 32 * k, w);
        }
      }
    }
  }
};

struct DecodeQ4_K {
  using Block = BlockQ4_K;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      const float dmin = load_half(b.dmin);
      for (int c = 0; c < 4; ++c) {
        const uint8_t* q = b.qs + 32 * c;
        uint8_t sc, mn;
        unpack_scale_min_k4(b.scales, 2 * c, sc, mn);
        const float d1 = d * float(sc), m1 = dmin * float(mn);
        unpack_scale_min_k4(b.scales, 2 * c + 1, sc, mn);
        const float d2 = d * float(sc), m2 = dmin * float(mn);
        float w[32];
        for (int l = 0; l < 32; ++l) w[l] = d1 * float(q[l] & 0x0F) - m1;
        sink.put32(i * 256 + 64 * c, w);
        for (int l = 0; l < 32; ++l) w[l] = d2 * float(q[l] >> 4) - m2;
        sink.put32(i * 256 + 64 * c + 32, w);
      }
    }
  }
};

struct DecodeQ5_K {
  using Block = BlockQ5_K;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      const float dmin = load_half(b.dmin);
      for (int c = 0; c < 4; ++c) {
        const uint8_t* q = b.qs + 32 * c;
        const uint8_t bit_lo = uint8_t(1u << (2 * c)), bit_hi = uint8_t(2u << (2 * c));
        uint8_t sc, mn;
        unpack_scale_min_k4(b.scales, 2 * c, sc, mn);
        const float d1 = d * float(sc), m1 = dmin * float(mn);
        unpack_scale_min_k4(b.scales, 2 * c + 1, sc, mn);
        const float d2 = d * float(sc), m2 = dmin * float(mn);
        float w[32];
        for (int l = 0; l < 32; ++l) w[l] = d1 * float((q[l] & 0x0F) + ((b.qh[l] & bit_lo) ? 16 : 0)) - m1;
        sink.put32(i * 256 + 64 * c, w);
        for (int l = 0; l < 32; ++l) w[l] = d2 * float((q[l] >> 4) + ((b.qh[l] & bit_hi) ? 16 : 0)) - m2;
        sink.put32(i * 256 + 64 * c + 32, w);
      }
    }
  }
};

struct DecodeQ6_K {
  using Block = BlockQ6_K;

  // Run R (0..3) of a half: weights 128h + 32R + l (l < 32) take the low (R < 2) or high (R >= 2) nibble of
  // ql[l + 32 * (R & 1)] and bits 2R..2R+1 of qh[l]; they span sub-blocks 2R and 2R + 1 of the half. R is a template
  // parameter so every shift is a constant and the loop vectorizes.
  template <int R, class Sink>
  static void run(const uint8_t* ql, const uint8_t* qh, const float* dsh, int64_t at, Sink& sink) {
    constexpr int kNibbleShift = (R >> 1) * 4, kHighShift = 2 * R;
    const uint8_t* qlr = ql + 32 * (R & 1);
    const float d0 = dsh[2 * R], d1 = dsh[2 * R + 1];
    float w[32];
    for (int l = 0; l < 16; ++l)
      w[l] = d0 * float(int(((qlr[l] >> kNibbleShift) & 0x0F) | (((qh[l] >> kHighShift) & 3) << 4)) - 32);
    for (int l = 16; l < 32; ++l)
      w[l] = d1 * float(int(((qlr[l] >> kNibbleShift) & 0x0F) | (((qh[l] >> kHighShift) & 3) << 4)) - 32);
    sink.put32(at + 32 * R, w);
  }

  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      float ds[16];  // d * scale per 16-weight sub-block (ggml evaluates d * sc * q left to right: same rounding)
      for (int s = 0; s < 16; ++s) ds[s] = d * float(b.scales[s]);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        const int64_t at = i * 256 + 128 * h;
        run<0>(ql, qh, ds + 8 * h, at, sink);
        run<1>(ql, qh, ds + 8 * h, at, sink);
        run<2>(ql, qh, ds + 8 * h, at, sink);
        run<3>(ql, qh, ds + 8 * h, at, sink);
      }
    }
  }
};

}  // namespace

void dequantize_q2_k(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ2_K>(s, d, n); }
void dequantize_q3_k(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ3_K>(s, d, n); }
void dequantize_q4_k(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ4_K>(s, d, n); }
void dequantize_q5_k(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ5_K>(s, d, n); }
void dequantize_q6_k(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeQ6_K>(s, d, n); }
double dot_q2_k(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ2_K>(s, x, n); }
double dot_q3_k(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ3_K>(s, x, n); }
double dot_q4_k(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ4_K>(s, x, n); }
double dot_q5_k(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ5_K>(s, x, n); }
double dot_q6_k(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeQ6_K>(s, x, n); }

}  // namespace greta::model::detail
