// Weight decoders for every GGUF weight type GRETA reads: the GPU twins of the CPU reference decoders
// (src/model/quants*.cpp; byte layouts in src/model/quant_blocks.h). Each value is computed with the reference's
// expression and operand order, and result expressions are `precise` (no a*b+c -> fma contraction; the CPU codecs
// are built with -ffp-contract=off), so decoded weights are bit-identical to model::dequantize_row, every type.
// (Contraction could not change them today: every product feeding an add is exact - an 11-bit f16 mantissa times
// codes of at most 6 + 5 bits - so `precise` guards against future edits; the test cannot tell fma from mul+add.)
//
// Usage: define exactly one WTYPE_<T> (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS
// MXFP4) and, before
// including this file, declare the weights as plain 32-bit words (any binding):
//   layout(binding = N) readonly buffer WeightBuf { uint weight_words[]; };
// Provides:
//   WEIGHT_BLOCK_ELEMS, WEIGHT_BLOCK_BYTES    elements / bytes per block (1 element for f32/f16/bf16)
//   vec4  dequant4(uint row_byte, uint e)     elements e..e+3 of the row starting at byte row_byte (any alignment);
//                                             needs e % 4 == 0 and e + 4 <= the row's element count
//   float dequant1(uint row_byte, uint e)     element e alone (row tails of f32/f16/bf16)
//   uint  read_u8(uint byte), read_u16(uint byte), read_u32_unaligned(uint byte)   little-endian, any alignment
//   float read_f16(uint byte)
// Reads touch only the words holding the requested bytes (never a word past them), so rows may end the buffer.
// No 8/16-bit storage extensions needed. Private helpers are prefixed dq_.

#if defined(WTYPE_F32) + defined(WTYPE_F16) + defined(WTYPE_BF16) + defined(WTYPE_Q4_0) + defined(WTYPE_Q4_1) + \
        defined(WTYPE_Q5_0) + defined(WTYPE_Q5_1) + defined(WTYPE_Q8_0) + defined(WTYPE_Q2_K) +                    \
        defined(WTYPE_Q3_K) + defined(WTYPE_Q4_K) + defined(WTYPE_Q5_K) + defined(WTYPE_Q6_K) +                    \
        defined(WTYPE_IQ4_NL) + defined(WTYPE_IQ4_XS) + defined(WTYPE_MXFP4) != 1
#error "dequant.glsl: define exactly one WTYPE_<type>"
#endif

// ---- byte access on weight_words (little-endian) ------------------------------------------------------------------

uint read_u8(uint byte) { return (weight_words[byte >> 2] >> ((byte & 3u) * 8u)) & 0xFFu; }

uint read_u16(uint byte) {
  const uint word = byte >> 2, shift = (byte & 3u) * 8u;
  uint v = weight_words[word] >> shift;
  if (shift == 24u) v |= weight_words[word + 1u] << 8;
  return v & 0xFFFFu;
}

uint read_u32_unaligned(uint byte) {
  const uint word = byte >> 2, shift = (byte & 3u) * 8u;
  const uint lo = weight_words[word];
  if (shift == 0u) return lo;
  return (lo >> shift) | (weight_words[word + 1u] << (32u - shift));
}

float read_f16(uint byte) { return unpackHalf2x16(read_u16(byte)).x; }

// The four bytes of w as uvec4(byte 0, byte 1, byte 2, byte 3), i.e. the codes of 4 consecutive elements.
uvec4 dq_bytes(uint w) { return (uvec4(w) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu; }

// The 4-bit codes of elements j..j+3 (j % 4 == 0) of a 32-element run whose 16 code bytes start at byte qs, laid out
// as ggml's Q4_0: element j < 16 is the low nibble of byte j, element j >= 16 the high nibble of byte j - 16.
uvec4 dq_nibbles4(uint qs, uint j) { return dq_bytes(read_u32_unaligned(qs + (j & 15u)) >> (j & 16u) / 4u) & 0x0Fu; }

// ---- unquantized ---------------------------------------------------------------------------------------------------

#if defined(WTYPE_F32)
// F32: element e = 4 bytes at 4e.
#define WEIGHT_BLOCK_ELEMS 1
#define WEIGHT_BLOCK_BYTES 4
float dequant1(uint row_byte, uint e) { return uintBitsToFloat(read_u32_unaligned(row_byte + 4u * e)); }
vec4 dequant4(uint row_byte, uint e) {
  const uint b = row_byte + 4u * e;
  return uintBitsToFloat(uvec4(read_u32_unaligned(b), read_u32_unaligned(b + 4u), read_u32_unaligned(b + 8u),
                               read_u32_unaligned(b + 12u)));
}

#elif defined(WTYPE_F16)
// F16: element e = IEEE binary16 at byte 2e.
#define WEIGHT_BLOCK_ELEMS 1
#define WEIGHT_BLOCK_BYTES 2
float dequant1(uint row_byte, uint e) { return read_f16(row_byte + 2u * e); }
vec4 dequant4(uint row_byte, uint e) {
  const uint b = row_byte + 2u * e;
  return vec4(unpackHalf2x16(read_u32_unaligned(b)), unpackHalf2x16(read_u32_unaligned(b + 4u)));
}

#elif defined(WTYPE_BF16)
// BF16: element e = bfloat16 (the top half of an f32) at byte 2e.
#define WEIGHT_BLOCK_ELEMS 1
#define WEIGHT_BLOCK_BYTES 2
float dequant1(uint row_byte, uint e) { return uintBitsToFloat(read_u16(row_byte + 2u * e) << 16); }
vec4 dequant4(uint row_byte, uint e) {
  const uint b = row_byte + 2u * e;
  const uint w0 = read_u32_unaligned(b), w1 = read_u32_unaligned(b + 4u);
  return uintBitsToFloat(uvec4(w0 << 16, w0 & 0xFFFF0000u, w1 << 16, w1 & 0xFFFF0000u));
}

// ---- legacy 32-element blocks: block e / 32, j = e % 32 -------------------------------------------------------------

#elif defined(WTYPE_Q4_0)
// Q4_0 (18 bytes): [0,2) f16 d | [2,18) qs[16]. j < 16: qs[j].lo, j >= 16: qs[j-16].hi.   w = (q - 8) * d
#define WEIGHT_BLOCK_ELEMS 32
#define WEIGHT_BLOCK_BYTES 18
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 5) * 18u, j = e & 31u;
  const float d = read_f16(blk);
  const uvec4 q = dq_nibbles4(blk + 2u, j);
  precise const vec4 w = vec4(ivec4(q) - 8) * d;
  return w;
}

#elif defined(WTYPE_Q4_1)
// Q4_1 (20 bytes): [0,2) f16 d | [2,4) f16 m | [4,20) qs[16]. Codes as Q4_0.              w = q * d + m
#define WEIGHT_BLOCK_ELEMS 32
#define WEIGHT_BLOCK_BYTES 20
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 5) * 20u, j = e & 31u;
  const vec2 dm = unpackHalf2x16(read_u32_unaligned(blk));
  const uvec4 q = dq_nibbles4(blk + 4u, j);
  precise const vec4 w = vec4(q) * dm.x + dm.y;
  return w;
}

#elif defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
// Q5_0 (22 bytes): [0,2) f16 d | [2,6) qh (u32) | [6,22) qs[16].                             w = (q - 16) * d
// Q5_1 (24 bytes): [0,2) f16 d | [2,4) f16 m | [4,8) qh | [8,24) qs[16].                     w = q * d + m
// Low 4 bits as Q4_0; fifth bit of element j = bit j of qh (the 4 bits of j..j+3 share one qh byte).
#define WEIGHT_BLOCK_ELEMS 32
#if defined(WTYPE_Q5_0)
#define WEIGHT_BLOCK_BYTES 22
#define DQ_QH 2u
#else
#define WEIGHT_BLOCK_BYTES 24
#define DQ_QH 4u
#endif
// Four 5-bit codes: the low nibbles of `nibbles`' bytes, with bits 0..3 of `bits` (their fifth bits) above them.
uvec4 dq_five_bit_codes(uint nibbles, uint bits) {
  return (dq_bytes(nibbles) & 0x0Fu) | (((uvec4(bits) >> uvec4(0u, 1u, 2u, 3u)) & 1u) << 4);
}
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 5) * WEIGHT_BLOCK_BYTES, j = e & 31u;
  const uint lo = read_u32_unaligned(blk + DQ_QH + 4u + (j & 15u)) >> (j & 16u) / 4u;
  const uint hi = read_u8(blk + DQ_QH + j / 8u) >> (j & 7u);
  const uvec4 q = dq_five_bit_codes(lo, hi);
#if defined(WTYPE_Q5_0)
  const float d = read_f16(blk);
  precise const vec4 w = vec4(ivec4(q) - 16) * d;
#else
  const vec2 dm = unpackHalf2x16(read_u32_unaligned(blk));
  precise const vec4 w = vec4(q) * dm.x + dm.y;
#endif
  return w;
}
#undef DQ_QH

#elif defined(WTYPE_Q8_0)
// Q8_0 (34 bytes): [0,2) f16 d | [2,34) int8 qs[32]; element j = qs[j].                     w = qs * d
#define WEIGHT_BLOCK_ELEMS 32
#define WEIGHT_BLOCK_BYTES 34
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 5) * 34u, j = e & 31u;
  const float d = read_f16(blk);
  // Each byte moved to the top, then an arithmetic shift back down sign-extends it.
  const ivec4 q = ivec4(uvec4(read_u32_unaligned(blk + 2u + j)) << uvec4(24u, 16u, 8u, 0u)) >> 24;
  precise const vec4 w = vec4(q) * d;
  return w;
}

// ---- K-quants: 256-element super-blocks, block e / 256, j = e % 256 -------------------------------------------------
// Q2_K / Q3_K / Q6_K 2-bit fields are interleaved: element j's code sits in byte 32*(j/128) + j%32 at bit
// 2*((j%128)/32), so j..j+3 are bytes l..l+3 (l = j % 32) of one 32-byte run, all at the same shift.

#elif defined(WTYPE_Q2_K)
// Q2_K (84 bytes): [0,16) scales[16] | [16,80) qs[64] | [80,82) f16 d | [82,84) f16 dmin.
//   Sub-block s = j/16: scale scales[s].lo, min scales[s].hi. q = 2-bit code.              w = (d * sc) * q - dmin * mn
#define WEIGHT_BLOCK_ELEMS 256
#define WEIGHT_BLOCK_BYTES 84
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 8) * 84u, j = e & 255u;
  const vec2 dm = unpackHalf2x16(read_u32_unaligned(blk + 80u));
  const uint sm = read_u8(blk + j / 16u);
  const uint qw = read_u32_unaligned(blk + 16u + 32u * (j / 128u) + (j & 31u));
  const uvec4 q = dq_bytes(qw >> (2u * ((j & 127u) / 32u))) & 3u;
  precise const float dl = dm.x * float(sm & 0x0Fu), ml = dm.y * float(sm >> 4);
  precise const vec4 w = dl * vec4(q) - ml;
  return w;
}

#elif defined(WTYPE_Q3_K)
// Q3_K (110 bytes): [0,32) hmask[32] | [32,96) qs[64] | [96,108) scales[12] | [108,110) f16 d.
//   Low 2 bits: qs (interleaved). High bit: bit j/32 of hmask[j%32]; q = low - (high ? 0 : 4).
//   Sub-block s = j/16, 6-bit scale: low 4 bits s < 8 ? scales[s].lo : scales[s-8].hi, high 2 bits = bits
//   2*(s/4).. of scales[8 + s%4]; sc = code - 32.                                         w = (d * sc) * q
#define WEIGHT_BLOCK_ELEMS 256
#define WEIGHT_BLOCK_BYTES 110
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 8) * 110u, j = e & 255u, l = j & 31u, s = j / 16u;
  const float d = read_f16(blk + 108u);
  const uint sc_lo = (read_u8(blk + 96u + (s & 7u)) >> (s & 8u) / 2u) & 0x0Fu;
  const uint sc_hi = (read_u8(blk + 104u + (s & 3u)) >> (2u * (s / 4u))) & 3u;
  const int sc = int(sc_lo | (sc_hi << 4)) - 32;
  const uvec4 low = dq_bytes(read_u32_unaligned(blk + 32u + 32u * (j / 128u) + l) >> (2u * ((j & 127u) / 32u))) & 3u;
  const uvec4 high = dq_bytes(read_u32_unaligned(blk + l) >> (j / 32u)) & 1u;
  const ivec4 q = ivec4(low) - 4 * ivec4(1u - high);
  precise const float dl = d * float(sc);
  precise const vec4 w = dl * vec4(q);
  return w;
}

#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// Q4_K (144 bytes): [0,2) f16 d | [2,4) f16 dmin | [4,16) scales[12] | [16,144) qs[128].
// Q5_K (176 bytes): [0,2) f16 d | [2,4) f16 dmin | [4,16) scales[12] | [16,48) qh[32] | [48,176) qs[128].
//   64-element chunk c = j/64, l = j%32: qs[32c + l].lo for j%64 < 32, .hi otherwise. Q5_K's fifth bit: bit j/32 of
//   qh[l] (adds 16). Sub-block s = j/32 has 6-bit scale sc and min mn packed in scales[12]:
//     s < 4:  sc = scales[s] & 63,                            mn = scales[s+4] & 63
//     s >= 4: sc = scales[s+4].lo | (scales[s-4] >> 6) << 4,  mn = scales[s+4].hi | (scales[s] >> 6) << 4
//                                                                                          w = (d * sc) * q - dmin * mn
#define WEIGHT_BLOCK_ELEMS 256
#if defined(WTYPE_Q4_K)
#define WEIGHT_BLOCK_BYTES 144
#define DQ_QS 16u
#else
#define WEIGHT_BLOCK_BYTES 176
#define DQ_QS 48u
#endif
// The 6-bit scale and min of sub-block s (0..7) from the super-block's 12 scale bytes held as 3 words (bytes 4..15
// of the block: w.x = scales[0..4), w.y = scales[4..8), w.z = scales[8..12)), as ggml's get_scale_min_k4: (sc, mn).
// Shared by dequant4 and the GEMMs that load the block header as one uvec4 (matmul_coopmat*.comp).
uvec2 dq_k4_scale_min(uvec3 w, uint s) {
  if (s < 4u) return uvec2((w.x >> (8u * s)) & 63u, (w.y >> (8u * s)) & 63u);  // scales[s], scales[s + 4]
  const uint t = 8u * (s - 4u), packed = (w.z >> t) & 0xFFu;                  // scales[s + 4]
  return uvec2((packed & 0x0Fu) | (((w.x >> (t + 6u)) & 3u) << 4),   // high bits from scales[s - 4]
               (packed >> 4) | (((w.y >> (t + 6u)) & 3u) << 4));     // high bits from scales[s]
}
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 8) * WEIGHT_BLOCK_BYTES, j = e & 255u, l = j & 31u, s = j / 32u;
  const vec2 dm = unpackHalf2x16(read_u32_unaligned(blk));
  const uvec2 scale_min = dq_k4_scale_min(
      uvec3(read_u32_unaligned(blk + 4u), read_u32_unaligned(blk + 8u), read_u32_unaligned(blk + 12u)), s);
  const uint sc = scale_min.x, mn = scale_min.y;
  uvec4 q = dq_bytes(read_u32_unaligned(blk + DQ_QS + 32u * (j / 64u) + l) >> (j & 32u) / 8u) & 0x0Fu;
#if defined(WTYPE_Q5_K)
  q += (dq_bytes(read_u32_unaligned(blk + 16u + l) >> s) & 1u) << 4;
#endif
  precise const float d1 = dm.x * float(sc), m1 = dm.y * float(mn);
  precise const vec4 w = d1 * vec4(q) - m1;
  return w;
}
#undef DQ_QS

#elif defined(WTYPE_Q6_K)
// Q6_K (210 bytes): [0,128) ql[128] | [128,192) qh[64] | [192,208) int8 scales[16] | [208,210) f16 d.
//   Half h = j/128, run R = (j%128)/32, l = j%32: low 4 bits = nibble R/2 of ql[64h + 32*(R&1) + l], high 2 bits =
//   bits 2R..2R+1 of qh[32h + l]; q = 6-bit value - 32. Sub-block s = j/16.                 w = (d * scales[s]) * q
#define WEIGHT_BLOCK_ELEMS 256
#define WEIGHT_BLOCK_BYTES 210
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 8) * 210u, j = e & 255u, h = j / 128u, r = (j & 127u) / 32u, l = j & 31u;
  const float d = read_f16(blk + 208u);
  const int sc = bitfieldExtract(int(read_u8(blk + 192u + j / 16u)), 0, 8);
  const uvec4 lo = dq_bytes(read_u32_unaligned(blk + 64u * h + 32u * (r & 1u) + l) >> (4u * (r / 2u))) & 0x0Fu;
  const uvec4 hi = dq_bytes(read_u32_unaligned(blk + 128u + 32u * h + l) >> (2u * r)) & 3u;
  const ivec4 q = ivec4(lo | (hi << 4)) - 32;
  precise const float ds = d * float(sc);
  precise const vec4 w = ds * vec4(q);
  return w;
}

// ---- table formats: 4-bit codes index a table of 16 signed integers (quant_blocks.h); codes laid out as Q4_0's ------
// The table is 16 signed bytes in 4 words (code c: byte c % 4 of word c / 4), selected per component (no indexed
// array: drivers may copy a constant array into private memory on every use).
// IQ4_NL / IQ4_XS: {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
// MXFP4 (E2M1 doubled): {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS) || defined(WTYPE_MXFP4)
#if defined(WTYPE_MXFP4)
const uvec4 DQ_LUT_WORDS = uvec4(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);
#else
const uvec4 DQ_LUT_WORDS = uvec4(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
#endif
// The table values of the 4 codes q (each < 16) as bytes (two's complement).
uvec4 dq_lut_bytes(uvec4 q) {
  const bvec4 b2 = notEqual(q & 4u, uvec4(0u));
  const uvec4 w = mix(mix(uvec4(DQ_LUT_WORDS.x), uvec4(DQ_LUT_WORDS.y), b2),
                      mix(uvec4(DQ_LUT_WORDS.z), uvec4(DQ_LUT_WORDS.w), b2), greaterThanEqual(q, uvec4(8u)));
  return (w >> ((q & 3u) * 8u)) & 0xFFu;
}
// The table values of the 4 codes q, as floats (sign-extended bytes).
vec4 dq_lut(uvec4 q) { return vec4((ivec4(dq_lut_bytes(q)) << 24) >> 24); }

#if defined(WTYPE_IQ4_NL)
// IQ4_NL (18 bytes): [0,2) f16 d | [2,18) qs[16]. j < 16: qs[j].lo, j >= 16: qs[j-16].hi.    w = d * table[q]
#define WEIGHT_BLOCK_ELEMS 32
#define WEIGHT_BLOCK_BYTES 18
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 5) * 18u, j = e & 31u;
  const float d = read_f16(blk);
  const uvec4 q = dq_nibbles4(blk + 2u, j);
  precise const vec4 w = d * dq_lut(q);
  return w;
}

#elif defined(WTYPE_IQ4_XS)
// IQ4_XS (136 bytes): [0,2) f16 d | [2,4) scales_h (u16) | [4,8) scales_l[4] | [8,136) qs[128]. Sub-block s = j/32:
//   6-bit code ls = nibble s%2 of scales_l[s/2] | bits 2s..2s+1 of scales_h << 4; codes qs[16s ..] as IQ4_NL's.
//                                                                                     w = (d * (ls - 32)) * table[q]
#define WEIGHT_BLOCK_ELEMS 256
#define WEIGHT_BLOCK_BYTES 136
// Sub-block s's 6-bit scale code ls from the super-block's first two words (w0 = d | scales_h << 16, w1 = scales_l).
uint dq_iq4_xs_scale(uint w0, uint w1, uint s) {
  return ((w1 >> (4u * s)) & 0x0Fu) | (((w0 >> (16u + 2u * s)) & 3u) << 4);
}
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 8) * 136u, j = e & 255u, s = j / 32u, l = j & 31u;
  const float d = read_f16(blk);
  const uint ls = dq_iq4_xs_scale(read_u32_unaligned(blk), read_u32_unaligned(blk + 4u), s);
  const uvec4 q = dq_nibbles4(blk + 8u + 16u * s, l);
  precise const float dl = d * float(int(ls) - 32);
  precise const vec4 w = dl * dq_lut(q);
  return w;
}

#else
// MXFP4 (17 bytes: blocks start at any byte): [0] e (E8M0) | [1,17) qs[16], codes as Q4_0's. The table is the E2M1
// values doubled, so the scale is 2^(e - 128) (e = 0, 1: subnormal, which a device may flush to 0).
//                                                                                          w = table[q] * 2^(e - 128)
#define WEIGHT_BLOCK_ELEMS 32
#define WEIGHT_BLOCK_BYTES 17
// 2^(e - 128) from the E8M0 byte e.
float dq_e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); }
vec4 dequant4(uint row_byte, uint e) {
  const uint blk = row_byte + (e >> 5) * 17u, j = e & 31u;
  const float d = dq_e8m0_half(read_u8(blk));
  const uvec4 q = dq_nibbles4(blk + 1u, j);
  precise const vec4 w = dq_lut(q) * d;
  return w;
}
#endif

#endif

#if WEIGHT_BLOCK_ELEMS > 1
// Quantized types: one element out of its group of 4.
float dequant1(uint row_byte, uint e) { return dequant4(row_byte, e & ~3u)[e & 3u]; }
#endif
