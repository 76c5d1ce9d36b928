// Byte layouts of ggml's quantized blocks, exactly as stored in GGUF files (ggml-common.h). Every multi-byte field
// is little-endian. The structs are made of bytes only (alignof == 1), so a block may sit at any address: rows inside
// a memory-mapped file are only as aligned as block_bytes allows. Multi-byte fields are read byte-wise
// (detail::load_half / load_u32 in quants_internal.h).
//
// Notation: a block holds E weights w[0..E). "q" is the stored unsigned code of a weight, "d" a scale, "m" a min or
// offset. fp16 = IEEE binary16. Where a byte holds two 4-bit codes, "lo" is bits 0-3 and "hi" bits 4-7.
#pragma once
#include <bit>
#include <cstdint>

namespace greta::model {

constexpr int kQK = 32;    // weights per legacy block (Q4_0 .. Q8_0)
constexpr int kQKK = 256;  // weights per K-quant super-block

// ---- legacy 32-weight blocks ---------------------------------------------------------------------------------------

// Q4_0 (18 bytes): [0..2) fp16 d | [2..18) qs[16].
//   qs[j].lo -> w[j], qs[j].hi -> w[j+16]   (j < 16)          w = (q - 8) * d
struct BlockQ4_0 {
  uint8_t d[2];
  uint8_t qs[16];
};

// Q4_1 (20 bytes): [0..2) fp16 d | [2..4) fp16 m | [4..20) qs[16].
//   qs[j].lo -> w[j], qs[j].hi -> w[j+16]                     w = q * d + m
struct BlockQ4_1 {
  uint8_t d[2];
  uint8_t m[2];
  uint8_t qs[16];
};

// Q5_0 (22 bytes): [0..2) fp16 d | [2..6) qh (u32 LE) | [6..22) qs[16].
//   q(w[j])    = qs[j].lo | bit j      of qh << 4             w = (q - 16) * d
//   q(w[j+16]) = qs[j].hi | bit (j+16) of qh << 4
struct BlockQ5_0 {
  uint8_t d[2];
  uint8_t qh[4];
  uint8_t qs[16];
};

// Q5_1 (24 bytes): [0..2) fp16 d | [2..4) fp16 m | [4..8) qh (u32 LE) | [8..24) qs[16]. Codes as Q5_0; w = q * d + m
struct BlockQ5_1 {
  uint8_t d[2];
  uint8_t m[2];
  uint8_t qh[4];
  uint8_t qs[16];
};

// Q8_0 (34 bytes): [0..2) fp16 d | [2..34) int8 qs[32].       w[j] = qs[j] * d
struct BlockQ8_0 {
  uint8_t d[2];
  int8_t qs[32];
};

// ---- K-quants: 256-weight super-blocks of 16 or 8 sub-blocks -------------------------------------------------------
//
// The 2- and 3-bit codes of Q2_K / Q3_K (and the 2 high bits of Q6_K) are interleaved the same way: the super-block is
// two 128-weight halves h; in half h, byte qs[32h + l] (l < 32) holds 4 codes, bits 2k..2k+1 belonging to weight
// 128h + 32k + l. Put differently, weight e lives in byte 32*(e/128) + e%32 at shift 2*((e%128)/32).

// Q2_K (84 bytes): [0..16) scales[16] | [16..80) qs[64] | [80..82) fp16 d | [82..84) fp16 dmin.
//   16 sub-blocks of 16 weights; sub-block s = e/16 has scale code scales[s].lo and min code scales[s].hi (4 bits).
//   q = 2-bit code (interleaving above)                        w = d * sc * q - dmin * mn
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint8_t d[2];
  uint8_t dmin[2];
};

// Q3_K (110 bytes): [0..32) hmask[32] | [32..96) qs[64] | [96..108) scales[12] | [108..110) fp16 d.
//   Low 2 bits of the 3-bit code: qs, interleaved as above. High bit of weight e: bit e/32 of hmask[e%32].
//   Stored value v = low | high << 2 in 0..7, signed code q = v - 4 (a SET high bit means "no -4").
//   16 sub-blocks of 16 (s = e/16) with 6-bit scale codes packed into 12 bytes:
//     low 4 bits:  s < 8 -> scales[s].lo,   s >= 8 -> scales[s-8].hi
//     high 2 bits: bits 2*(s/4)..2*(s/4)+1 of scales[8 + s%4]
//   signed scale sc = code - 32                                w = d * sc * q
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint8_t d[2];
};

// The 12-byte scale/min packing shared by Q4_K and Q5_K: 8 sub-blocks of 32 weights, each with a 6-bit scale code
// sc[s] and a 6-bit min code mn[s]:
//   s < 4:  sc = scales[s] & 63,                         mn = scales[s+4] & 63
//   s >= 4: sc = scales[s+4].lo | (scales[s-4] >> 6) << 4, mn = scales[s+4].hi | (scales[s] >> 6) << 4
// i.e. bytes 0-3 hold sc[0..4) plus the top 2 bits of sc[4..8), bytes 4-7 mn[0..4) plus the top bits of mn[4..8),
// bytes 8-11 the low nibbles of sc[4..8) (lo) and mn[4..8) (hi).

// Q4_K (144 bytes): [0..2) fp16 d | [2..4) fp16 dmin | [4..16) scales[12] | [16..144) qs[128].
//   Four 64-weight chunks c: qs[32c + l].lo -> weight 64c + l (sub-block 2c), .hi -> weight 64c + 32 + l (sub-block
//   2c+1).                                                     w = d * sc[s] * q - dmin * mn[s]
struct BlockQ4_K {
  uint8_t d[2];
  uint8_t dmin[2];
  uint8_t scales[12];
  uint8_t qs[128];
};

// Q5_K (176 bytes): [0..2) fp16 d | [2..4) fp16 dmin | [4..16) scales[12] | [16..48) qh[32] | [48..176) qs[128].
//   Low 4 bits as Q4_K. Fifth bit of weight e: bit e/32 of qh[e%32] (so chunk c's low-nibble weights use bit 2c,
//   its high-nibble weights bit 2c+1).                          w = d * sc[s] * q - dmin * mn[s], q in 0..31
struct BlockQ5_K {
  uint8_t d[2];
  uint8_t dmin[2];
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};

// Q6_K (210 bytes): [0..128) ql[128] | [128..192) qh[64] | [192..208) int8 scales[16] | [208..210) fp16 d.
//   Two 128-weight halves h; within half h (ql += 64h, qh += 32h), for l < 32:
//     weight 128h + l      : ql[l].lo      | ((qh[l] >> 0) & 3) << 4
//     weight 128h + l + 32 : ql[l + 32].lo | ((qh[l] >> 2) & 3) << 4
//     weight 128h + l + 64 : ql[l].hi      | ((qh[l] >> 4) & 3) << 4
//     weight 128h + l + 96 : ql[l + 32].hi | ((qh[l] >> 6) & 3) << 4
//   q = that 6-bit value - 32; sub-block s = e/16 has the signed 8-bit scale scales[s].   w = d * scales[s] * q
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint8_t d[2];
};

// ---- table formats: 4-bit codes that index a fixed table of 16 signed values -------------------------------------
//
// The codes are laid out as Q4_0's within each 32-weight block: qs[j].lo -> w[j], qs[j].hi -> w[j+16] (j < 16).

// The IQ4_NL / IQ4_XS table (ggml's kvalues_iq4nl): a non-uniform grid, denser near zero, asymmetric (-127 .. 113).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The MXFP4 table (ggml's kvalues_mxfp4): the 16 FP4 E2M1 values (sign bit 3; 0, 0.5, 1, 1.5, 2, 3, 4, 6) doubled,
// so they are integers; the block scale is therefore half the E8M0 power of two (e8m0_to_float_half).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// IQ4_NL (18 bytes): [0..2) fp16 d | [2..18) qs[16].          w = d * kIq4nlValues[q]
struct BlockIQ4_NL {
  uint8_t d[2];
  uint8_t qs[16];
};

// IQ4_XS (136 bytes): [0..2) fp16 d | [2..4) scales_h (u16 LE) | [4..8) scales_l[4] | [8..136) qs[128].
//   8 sub-blocks of 32; sub-block s has the 6-bit scale code ls = scales_l[s/2] nibble (s%2) (lo for even s) |
//   bits 2s..2s+1 of scales_h << 4, and its codes in qs[16s .. 16s+16) laid out as IQ4_NL's.
//                                                              w = (d * (ls - 32)) * kIq4nlValues[q]
struct BlockIQ4_XS {
  uint8_t d[2];
  uint8_t scales_h[2];
  uint8_t scales_l[4];
  uint8_t qs[128];
};

// MXFP4 (17 bytes, so blocks sit at any byte): [0] e (E8M0: the power of two 2^(e - 127)) | [1..17) qs[16].
//                                                              w = kMxfp4Values[q] * 2^(e - 128)
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};

// 2^(e - 128) as a float, exactly (e = 0 and 1 are subnormal: 2^-128, 2^-127); ggml's e8m0 "half" conversion.
inline float e8m0_to_float_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (uint32_t(e) - 1u) << 23;
  return std::bit_cast<float>(bits);
}

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17);
static_assert(alignof(BlockIQ4_XS) == 1 && alignof(BlockMXFP4) == 1);
static_assert(alignof(BlockQ4_0) == 1 && alignof(BlockQ6_K) == 1 && alignof(BlockQ4_K) == 1);

// Unpacks the 6-bit scale and min codes of sub-block s (0..7) from Q4_K / Q5_K's 12 scale bytes.
inline void unpack_scale_min_k4(const uint8_t* scales, int s, uint8_t& sc, uint8_t& mn) {
  if (s < 4) {
    sc = scales[s] & 63;
    mn = scales[s + 4] & 63;
  } else {
    sc = uint8_t((scales[s + 4] & 0x0F) | ((scales[s - 4] >> 6) << 4));
    mn = uint8_t((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
  }
}

// The 6-bit scale code (unsigned; subtract 32) of IQ4_XS sub-block s (0..7).
inline int unpack_scale_iq4_xs(const BlockIQ4_XS& b, int s) {
  const int low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0F;
  const int high = ((b.scales_h[s / 4] >> (2 * (s % 4))) & 3);
  return low | (high << 4);
}

// Unpacks the 6-bit scale code of sub-block s (0..15) from Q3_K's 12 scale bytes (unsigned; subtract 32).
inline int unpack_scale_q3_k(const uint8_t* scales, int s) {
  const int low = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

}  // namespace greta::model
