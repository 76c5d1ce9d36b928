// In-kernel weight decoding for the HIP backend, written once for host and device (GRETA_HD) so the CPU tests run
// the very code the kernels run against the reference codecs (model::dequantize_row).
//
// The unit of work is a group of 16 consecutive weights of one row starting at k0 (a multiple of 16). 16 divides
// every block and sub-block size of ggml's formats (32-weight legacy, IQ4_NL and MXFP4 blocks, 16- or 32-weight
// K-quant and IQ4_XS sub-blocks), so
// a group never straddles a scale: each group reads its block's scales once and decodes 16 codes. Block layouts are
// documented in src/model/quant_blocks.h; the expressions below keep the reference's operand order
// (e.g. Q4_K: (d * sc) * q - dmin * mn) so results match it up to the compiler's fma contraction.
//
// F32 / F16 / BF16 rows may have any length (cols): elements at or past `cols` decode as 0, which is how the GEMM
// pads K. Quantized rows always hold whole blocks (the GGUF reader checks cols % block_elems == 0).
#pragma once
#include <cstdint>

#include "hip/gpu_api.h"

namespace greta::hip {

// ggml's type ids (the values of model::GgmlType; tests/hip checks they agree).
enum class WType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30, MXFP4 = 39,
};

// Bytes and weights per block (1 element for the float types).
GRETA_HD constexpr int block_elems(WType t) {
  return t == WType::F32 || t == WType::F16 || t == WType::BF16 ? 1
         : (t == WType::Q2_K || t == WType::Q3_K || t == WType::Q4_K || t == WType::Q5_K || t == WType::Q6_K ||
            t == WType::IQ4_XS)
             ? 256
             : 32;
}
GRETA_HD constexpr int block_bytes(WType t) {
  switch (t) {
    case WType::F32: return 4;
    case WType::F16: return 2;
    case WType::BF16: return 2;
    case WType::Q4_0: return 18;
    case WType::Q4_1: return 20;
    case WType::Q5_0: return 22;
    case WType::Q5_1: return 24;
    case WType::Q8_0: return 34;
    case WType::Q2_K: return 84;
    case WType::Q3_K: return 110;
    case WType::Q4_K: return 144;
    case WType::Q5_K: return 176;
    case WType::Q6_K: return 210;
    case WType::IQ4_NL: return 18;
    case WType::IQ4_XS: return 136;
    case WType::MXFP4: return 17;
  }
  return 0;
}
// Whether `t` (any 32-bit id from a file) is one of the types above.
GRETA_HD constexpr bool is_supported(WType t) { return block_bytes(t) != 0; }

GRETA_HD constexpr uint64_t row_bytes(WType t, int64_t cols) {
  return uint64_t(cols / block_elems(t)) * uint64_t(block_bytes(t));
}

namespace detail {
GRETA_HD GRETA_INLINE float load_f16(const uint8_t* p) { return half_bits_to_float(uint16_t(p[0] | (p[1] << 8))); }
GRETA_HD GRETA_INLINE uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
// Q4_K / Q5_K 6-bit scale and min codes of sub-block s (0..7); see model::unpack_scale_min_k4.
GRETA_HD GRETA_INLINE void scale_min_k4(const uint8_t* sc12, int s, int& sc, int& mn) {
  if (s < 4) {
    sc = sc12[s] & 63;
    mn = sc12[s + 4] & 63;
  } else {
    sc = (sc12[s + 4] & 0x0F) | ((sc12[s - 4] >> 6) << 4);
    mn = (sc12[s + 4] >> 4) | ((sc12[s] >> 6) << 4);
  }
}
// Q3_K 6-bit scale code of sub-block s (0..15), unsigned; see model::unpack_scale_q3_k.
GRETA_HD GRETA_INLINE int scale_q3_k(const uint8_t* sc12, int s) {
  const int low = s < 8 ? (sc12[s] & 0x0F) : (sc12[s - 8] >> 4);
  const int high = (sc12[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}
// Table formats: the value of 4-bit code q (0..15). The 16 signed bytes of each table are packed into two 64-bit
// constants (codes 0-7, 8-15), so the lookup is a shift, not an indexed array (which AMD GPUs would put in scratch).
// kvalues_iq4nl = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// kvalues_mxfp4 = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12} (the E2M1 values doubled).
GRETA_HD GRETA_INLINE int table_value(uint64_t lo, uint64_t hi, int q) {
  return int(int8_t(uint8_t((q < 8 ? lo : hi) >> (8 * (q & 7)))));
}
GRETA_HD GRETA_INLINE int iq4nl_value(int q) { return table_value(0xF6EADDCFBFAD9881ull, 0x7159453526190D01ull, q); }
GRETA_HD GRETA_INLINE int mxfp4_value(int q) { return table_value(0x0C08060403020100ull, 0xF4F8FAFCFDFEFF00ull, q); }
// MXFP4's block scale from its E8M0 byte: 2^(e - 128) (e = 0, 1: subnormal), the doubled table's half.
GRETA_HD GRETA_INLINE float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (uint32_t(e) - 1u) << 23;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
}  // namespace detail

// Decodes weights [k0, k0 + 16) of the row starting at `row` (a row of `cols` weights of type T) into out[16].
template <WType T>
GRETA_HD GRETA_INLINE void dequant_group16(const uint8_t* row, int64_t k0, int64_t cols, float* out) {
  using namespace detail;
  if constexpr (T == WType::F32 || T == WType::F16 || T == WType::BF16) {
    for (int j = 0; j < 16; ++j) {
      const int64_t k = k0 + j;
      float v = 0.f;
      if (k < cols) {
        if constexpr (T == WType::F32) {
          const uint32_t bits = load_u32(row + 4 * k);
          float f;
          memcpy(&f, &bits, 4);
          v = f;
        } else if constexpr (T == WType::F16) {
          v = load_f16(row + 2 * k);
        } else {
          v = bf16_bits_to_float(uint16_t(row[2 * k] | (row[2 * k + 1] << 8)));
        }
      }
      out[j] = v;
    }
  } else if constexpr (T == WType::Q4_0 || T == WType::Q4_1 || T == WType::Q5_0 || T == WType::Q5_1 ||
                       T == WType::Q8_0) {
    const uint8_t* b = row + (k0 / 32) * block_bytes(T);
    const int half = int(k0 % 32);  // 0: weights 0..15 of the block (low nibbles), 16: weights 16..31 (high nibbles)
    const float d = load_f16(b);
    if constexpr (T == WType::Q8_0) {
      for (int j = 0; j < 16; ++j) out[j] = float(int8_t(b[2 + half + j])) * d;
    } else if constexpr (T == WType::Q4_0) {
      for (int j = 0; j < 16; ++j) out[j] = float(((half ? b[2 + j] >> 4 : b[2 + j] & 0x0F)) - 8) * d;
    } else if constexpr (T == WType::Q4_1) {
      const float m = load_f16(b + 2);
      for (int j = 0; j < 16; ++j) out[j] = float(half ? b[4 + j] >> 4 : b[4 + j] & 0x0F) * d + m;
    } else {
      constexpr int qh_at = T == WType::Q5_0 ? 2 : 4, qs_at = qh_at + 4;
      const uint32_t qh = load_u32(b + qh_at);
      const float m = T == WType::Q5_1 ? load_f16(b + 2) : 0.f;
      for (int j = 0; j < 16; ++j) {
        const int lo = half ? b[qs_at + j] >> 4 : b[qs_at + j] & 0x0F;
        const int q = lo | int(((qh >> (half + j)) & 1u) << 4);
        if constexpr (T == WType::Q5_0)
          out[j] = float(q - 16) * d;
        else
          out[j] = float(q) * d + m;
      }
    }
  } else if constexpr (T == WType::IQ4_NL || T == WType::MXFP4) {
    // Table formats, 32-weight blocks: IQ4_NL f16 d | qs[16]; MXFP4 e (E8M0) | qs[16]. Codes as Q4_0's.
    const uint8_t* b = row + (k0 / 32) * block_bytes(T);
    const int half = int(k0 % 32);
    if constexpr (T == WType::IQ4_NL) {
      const float d = load_f16(b);
      for (int j = 0; j < 16; ++j) out[j] = d * float(iq4nl_value(half ? b[2 + j] >> 4 : b[2 + j] & 0x0F));
    } else {
      const float d = e8m0_half(b[0]);
      for (int j = 0; j < 16; ++j) out[j] = float(mxfp4_value(half ? b[1 + j] >> 4 : b[1 + j] & 0x0F)) * d;
    }
  } else if constexpr (T == WType::IQ4_XS) {
    // d | scales_h (u16) | scales_l[4] | qs[128]; sub-block s = e/32 has the 6-bit code ls (nibble s%2 of
    // scales_l[s/2], bits 2s.. of scales_h above it) and its codes in qs[16s ..] as IQ4_NL's.
    const uint8_t* b = row + (k0 / 256) * block_bytes(T);
    const int e = int(k0 % 256), s = e / 32, half = e % 32;
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
    const float dl = load_f16(b) * float(ls - 32);
    const uint8_t* q = b + 8 + 16 * s;
    for (int j = 0; j < 16; ++j) out[j] = dl * float(iq4nl_value(half ? q[j] >> 4 : q[j] & 0x0F));
  } else {
    // K-quants: super-block of 256; e = index inside it (a multiple of 16).
    const uint8_t* b = row + (k0 / 256) * block_bytes(T);
    const int e = int(k0 % 256);
    if constexpr (T == WType::Q2_K) {
      // scales[16] | qs[64] | d | dmin. Codes: byte 32*(e/128) + e%32, shift 2*((e%128)/32).
      const float d = load_f16(b + 80), dmin = load_f16(b + 82);
      const int s = e / 16, sc = b[s] & 0x0F, mn = b[s] >> 4;
      const float dl = d * float(sc), ml = dmin * float(mn);
      const uint8_t* q = b + 16 + 32 * (e / 128) + e % 32;
      const int shift = 2 * ((e % 128) / 32);
      for (int j = 0; j < 16; ++j) out[j] = dl * float((q[j] >> shift) & 3) - ml;
    } else if constexpr (T == WType::Q3_K) {
      // hmask[32] | qs[64] | scales[12] | d. High bit of weight e: bit e/32 of hmask[e%32]; set means "no -4".
      const float d = load_f16(b + 108);
      const float dl = d * float(scale_q3_k(b + 96, e / 16) - 32);
      const uint8_t* q = b + 32 + 32 * (e / 128) + e % 32;
      const uint8_t* hm = b + e % 32;
      const int shift = 2 * ((e % 128) / 32), hbit = e / 32;
      for (int j = 0; j < 16; ++j) {
        const int v = int((q[j] >> shift) & 3) - (((hm[j] >> hbit) & 1) ? 0 : 4);
        out[j] = dl * float(v);
      }
    } else if constexpr (T == WType::Q4_K || T == WType::Q5_K) {
      // d | dmin | scales[12] | [qh[32]] | qs[128]. 64-weight chunk c = e/64: low nibbles are sub-block 2c, high
      // nibbles sub-block 2c+1; Q5_K's fifth bit of weight e is bit e/32 of qh[e%32].
      const float d = load_f16(b), dmin = load_f16(b + 2);
      const int s = e / 32;
      int sc, mn;
      scale_min_k4(b + 4, s, sc, mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      constexpr int qs_at = T == WType::Q4_K ? 16 : 48;
      const uint8_t* q = b + qs_at + 32 * (e / 64) + e % 32;
      const bool high_nibble = (e % 64) >= 32;
      for (int j = 0; j < 16; ++j) {
        int v = high_nibble ? q[j] >> 4 : q[j] & 0x0F;
        if constexpr (T == WType::Q5_K) v |= ((b[16 + e % 32 + j] >> (e / 32)) & 1) << 4;
        out[j] = d1 * float(v) - m1;
      }
    } else {
      static_assert(T == WType::Q6_K);
      // ql[128] | qh[64] | int8 scales[16] | d. Half h = e/128, quarter = (e%128)/32, l = e%32.
      const float d = load_f16(b + 208);
      const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
      const uint8_t* ql = b + 64 * h + l + (quarter & 1) * 32;
      const uint8_t* qh = b + 128 + 32 * h + l;
      const float dl = d * float(int8_t(b[192 + e / 16]));
      for (int j = 0; j < 16; ++j) {
        const int lo = quarter < 2 ? ql[j] & 0x0F : ql[j] >> 4;
        const int hi = (qh[j] >> (2 * quarter)) & 3;
        out[j] = dl * float((lo | (hi << 4)) - 32);
      }
    }
  }
}

// X-macro of the supported weight types, for explicit kernel instantiation and host-side switches.
#define GRETA_HIP_FOR_EACH_WTYPE(X) \
  X(F32) X(F16) X(BF16) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) \
  X(IQ4_NL) X(IQ4_XS) X(MXFP4)

}  // namespace greta::hip
