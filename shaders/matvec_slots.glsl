// The per-type slots of matvec_block.comp, one weight type per variant (WTYPE_<T>), included after its helpers, slot
// layout and activations (MvAct, mv_dot_run / mv_dot / mv_dot2, mv_load4 / mv_load8, mv_float, mv_f16), which they
// use. Per type:
//   vec4 mv_xsum(a)                     the sums of x that the type's mins multiply (once per slot, shared by rows)
//   MvRow mv_row(row_byte, s)           slot s of the row at byte row_byte: its codes and scales, loaded and decoded
//                                       once per row, whatever the tokens
//   float mv_row_dot(w, a, xsum)        dot(that slot, the slot's activations a) for one token
// (MV_HAS_LUT: mv_lut_init fills the table formats' shared lookup table first.)

#if defined(MV_LEGACY)
#if defined(WTYPE_Q4_1) || defined(WTYPE_Q5_1)
#define MV_HAS_MIN
vec4 mv_xsum(const MvAct a) { return vec4(mv_xsum_block(a, 0), 0.0, 0.0, 0.0); }
#else
vec4 mv_xsum(const MvAct a) { return vec4(0.0); }
#endif
#if !defined(MV_WIDE)
// A slot of 8 elements: its two code words (groups 0 and 1, as bytes that MV_CODE_BIAS is subtracted from) and the
// block's scale d and min m (Q4_1, Q5_1):                                        w = d * (code - MV_CODE_BIAS) + m
struct MvRow {
  uint lo, hi;
  vec2 dm;
};
#endif

#if defined(WTYPE_Q4_0) && defined(MV_WIDE)
// 18 bytes: f16 d | qs[16], in words w .. w + 4 (the block starts at byte 0 or 2 of word w; the padding of weights
// to whole words holds the last block's fifth word).                                       w = (q - 8) * d
// Code word i of the block from its words i and i + 1, and d from word 0:
uint mv_code_word(uint lo, uint hi, bool mid) { return mid ? hi : (lo >> 16) | (hi << 16); }
float mv_block_d(uint v0, bool mid) { return unpackHalf2x16(mid ? v0 >> 16 : v0).x; }
struct MvRow {
  uvec4 lo, hi;  // the block's codes: low nibbles (elements 0..15), high nibbles (16..31)
  float d;
};
MvRow mv_row(uint row_byte, uint s) {
  const uint b = row_byte + 18u * s, w = b >> 2;
  const bool mid = (b & 2u) != 0u;
  const uint v0 = weight_words[w], v1 = weight_words[w + 1u], v2 = weight_words[w + 2u];
  const uint v3 = weight_words[w + 3u], v4 = weight_words[w + 4u];
  const uvec4 q = uvec4(mv_code_word(v0, v1, mid), mv_code_word(v1, v2, mid), mv_code_word(v2, v3, mid),
                        mv_code_word(v3, v4, mid));
  return MvRow(q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, mv_block_d(v0, mid));
}
float mv_row_dot(const MvRow w, const MvAct a, vec4 xsum) {
  const int dot_q = mv_idot(w.lo, a, 0) + mv_idot(w.hi, a, 4);
  return w.d * (a.d[0] * float(dot_q - 8 * a.s[0]));
}

#elif defined(WTYPE_Q4_0)
// 18 bytes: f16 d | qs[16].                                                                  w = (q - 8) * d
const float MV_CODE_BIAS = 8.0;
MvRow mv_row(uint row_byte, uint s) {
  const uint b = row_byte + 18u * (s >> 2);
  const uint q = mv_load4(b + 2u + 4u * (s & 3u));
  return MvRow(q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, vec2(mv_f16(b), 0.0));
}

#elif defined(WTYPE_Q4_1)
// 20 bytes (rows are whole words, so blocks are word-aligned): f16 d, f16 m | qs[16].       w = q * d + m
const float MV_CODE_BIAS = 0.0;
MvRow mv_row(uint row_byte, uint s) {
  const uint w = (row_byte + 20u * (s >> 2)) >> 2;
  const uint q = weight_words[w + 1u + (s & 3u)];
  return MvRow(q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, unpackHalf2x16(weight_words[w]));
}

#elif defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
// Q5_0, 22 bytes: f16 d | qh (u32) | qs[16].                                                  w = (q - 16) * d
// Q5_1, 24 bytes (word-aligned): f16 d, f16 m | qh | qs[16].                                  w = q * d + m
// Fifth bit of element j: bit j of qh.
#if defined(WTYPE_Q5_0)
const float MV_CODE_BIAS = 16.0;
#else
const float MV_CODE_BIAS = 0.0;
#endif
MvRow mv_row(uint row_byte, uint s) {
  const uint k = s & 3u;
#if defined(WTYPE_Q5_0)
  const uint b = row_byte + 22u * (s >> 2);
  const uint qh = mv_load4(b + 2u), q = mv_load4(b + 6u + 4u * k);
  const vec2 dm = vec2(mv_f16(b), 0.0);
#else
  const uint w = (row_byte + 24u * (s >> 2)) >> 2;
  const uint qh = weight_words[w + 1u], q = weight_words[w + 2u + k];
  const vec2 dm = unpackHalf2x16(weight_words[w]);
#endif
  const uint lo = (q & 0x0F0F0F0Fu) | (mv_spread4((qh >> (4u * k)) & 0xFu) << 4);
  const uint hi = ((q >> 4) & 0x0F0F0F0Fu) | (mv_spread4((qh >> (16u + 4u * k)) & 0xFu) << 4);
  return MvRow(lo, hi, dm);
}

#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS) || defined(WTYPE_MXFP4)
// Table formats: 4 codes (bytes of a nibble word) become 4 table values (dequant.glsl's dq_lut_bytes), packed as
// bytes: signed int8 for the integer dot product (X_Q8), or value + 128 (0..255, the 2^23 trick's range) with the
// bias 128 for f32 activations.
#if defined(X_Q8)
const float MV_CODE_BIAS = 0.0;
const uint MV_LUT_FLIP = 0u;
#else
const float MV_CODE_BIAS = 128.0;
const uint MV_LUT_FLIP = 0x80u;  // two's complement byte ^ 0x80 = value + 128
#endif
// A code byte (two codes) -> its two table bytes: low nibble's in bits 0..7, high nibble's in bits 8..15. Filled once
// per workgroup (mv_lut_init): a lookup per code byte instead of decoding each code through dq_lut_bytes's selects,
// which made the MXFP4 matvec ALU-bound (gpt-oss-20b's experts on the H200: about 600 GB/s).
shared uint mv_lut_pairs[256];
#define MV_HAS_LUT
void mv_lut_init() {
  for (uint i = gl_LocalInvocationID.x; i < 256u; i += gl_WorkGroupSize.x) {
    const uvec4 b = dq_lut_bytes(uvec4(i & 15u, i >> 4, 0u, 0u)) ^ MV_LUT_FLIP;
    mv_lut_pairs[i] = b.x | (b.y << 8);
  }
  barrier();
}
// The slot of code word q (low nibbles: group 0, high nibbles: group 1) with scale d: its table bytes.
MvRow mv_lut_row(uint q, float d) {
  const uint p0 = mv_lut_pairs[q & 0xFFu], p1 = mv_lut_pairs[(q >> 8) & 0xFFu];
  const uint p2 = mv_lut_pairs[(q >> 16) & 0xFFu], p3 = mv_lut_pairs[q >> 24];
  const uint g0 = (p0 & 0xFFu) | ((p1 & 0xFFu) << 8) | ((p2 & 0xFFu) << 16) | ((p3 & 0xFFu) << 24);
  const uint g1 = (p0 >> 8) | (p1 & 0xFF00u) | ((p2 & 0xFF00u) << 8) | ((p3 & 0xFF00u) << 16);
  return MvRow(g0, g1, vec2(d, 0.0));
}

#if defined(WTYPE_IQ4_NL)
// 18 bytes: f16 d | qs[16].                                                                  w = d * table[q]
MvRow mv_row(uint row_byte, uint s) {
  const uint b = row_byte + 18u * (s >> 2);
  return mv_lut_row(mv_load4(b + 2u + 4u * (s & 3u)), mv_f16(b));
}

#elif defined(WTYPE_IQ4_XS)
// 136 bytes (word-aligned): f16 d, u16 scales_h | scales_l[4] | qs[128]; block u = s / 4 is sub-block u % 8 of
// super-block u / 8, its 6-bit code: nibble of scales_l at bit 4 (u % 8) | bits 2 (u % 8) of scales_h << 4.
//                                                                                     w = (d * (ls - 32)) * table[q]
MvRow mv_row(uint row_byte, uint s) {
  const uint u = s >> 2, ib = u & 7u;
  const uint w = (row_byte >> 2) + 34u * (u >> 3);
  const uint w0 = weight_words[w];
  const uint ls = dq_iq4_xs_scale(w0, weight_words[w + 1u], ib);
  const float dl = unpackHalf2x16(w0).x * (mv_float(ls) - 32.0);
  return mv_lut_row(weight_words[w + 2u + 4u * ib + (s & 3u)], dl);
}

#else  // MXFP4
// 17 bytes (blocks start at any byte): e (E8M0) | qs[16].                          w = table[q] * 2^(e - 128)
MvRow mv_row(uint row_byte, uint s) {
  const uint b = row_byte + 17u * (s >> 2);
  return mv_lut_row(read_u32_unaligned(b + 1u + 4u * (s & 3u)), dq_e8m0_half(read_u8(b)));
}
#endif

#elif defined(WTYPE_Q8_0)
// 34 bytes: f16 d | int8 qs[32]; quarter k holds code words k and k + 4.                     w = qs * d
// Signed codes straight into the signed integer dot product (X_Q8), or int8 + 128 (bytes 0..255 for the 2^23 trick).
#if defined(X_Q8)
const float MV_CODE_BIAS = 0.0;
const uint MV_CODE_FLIP = 0u;
#else
const float MV_CODE_BIAS = 128.0;
const uint MV_CODE_FLIP = 0x80808080u;
#endif
MvRow mv_row(uint row_byte, uint s) {
  const uint b = row_byte + 34u * (s >> 2), qb = b + 2u + 4u * (s & 3u);
  return MvRow(mv_load4(qb) ^ MV_CODE_FLIP, mv_load4(qb + 16u) ^ MV_CODE_FLIP, vec2(mv_f16(b), 0.0));
}
#endif

#if !defined(MV_WIDE)
float mv_row_dot(const MvRow w, const MvAct a, vec4 xsum) {
  const float dot_q = w.dm.x * mv_dot2(w.lo, w.hi, MV_CODE_BIAS, a, 0);
#if defined(MV_HAS_MIN)
  return dot_q + w.dm.y * xsum.x;
#else
  return dot_q;
#endif
}
#endif

#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// Q4_K (144 bytes): f16 d, f16 dmin | scales[12] | qs[128].        Q5_K (176 bytes): ... | scales[12] | qh[32] | qs[128].
// Word-aligned (rows are whole words).
vec4 mv_xsum(const MvAct a) { return vec4(mv_xsum_block(a, 0), mv_xsum_block(a, 1), 0.0, 0.0); }
#if defined(WTYPE_Q4_K)
#define MV_BLOCK_WORDS 36u
#define MV_QS_WORD 4u
#else
#define MV_BLOCK_WORDS 44u
#define MV_QS_WORD 12u
#endif
// Super-blocks are whole 16-byte words (rows are whole super-blocks; weights are bound at multiples of 16 bytes).
layout(binding = 0) readonly buffer WeightVec4 { uvec4 weight_vec4[]; };
// The slot's MV_NW words from word `at` (a multiple of MV_NW).
uvec4 mv_words(uint at) {
#if defined(MV_WIDE)
  return weight_vec4[at >> 2];
#else
  return uvec4(weight_words[at], weight_words[at + 1u], 0u, 0u);
#endif
}
struct MvRow {
  uvec4 lo, hi;  // the slot's codes of sub-blocks 2c (low nibbles) and 2c + 1 (high), fifth bits included
  vec4 scale;    // d * sc and dmin * mn of sub-block 2c, then of 2c + 1
};
MvRow mv_row(uint row_byte, uint s) {
  const uint c = (s / MV_SPC) & 3u, k = s % MV_SPC;
  const uint w = (row_byte >> 2) + MV_BLOCK_WORDS * (s / (4u * MV_SPC));
  const uvec4 head = weight_vec4[w >> 2];  // f16 d, f16 dmin | scales[0..12)
  const vec2 dm = unpackHalf2x16(head.x);
  // Scale and min codes of sub-blocks 2c, 2c + 1 (unpack_scale_min_k4), two bytes at a time: bytes 2(c % 2) and
  // 2(c % 2) + 1 of scales[0..4) & 63 (c < 2), or of scales[8..12) low / high nibbles with the top two bits of
  // scales[0..4) / scales[4..8) above them (c >= 2).
  const uint sh = 16u * (c & 1u);
  const uint sc2 = c < 2u ? (head.y >> sh) & 0x3F3Fu : ((head.w >> sh) & 0x0F0Fu) | ((head.y >> (sh + 2u)) & 0x3030u);
  const uint mn2 = c < 2u ? (head.z >> sh) & 0x3F3Fu
                          : ((head.w >> (sh + 4u)) & 0x0F0Fu) | ((head.z >> (sh + 2u)) & 0x3030u);
  const uvec4 q = mv_words(w + MV_QS_WORD + 8u * c + MV_NW * k);
  uvec4 lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
#if defined(WTYPE_Q5_K)
  // Fifth bit of element l of sub-block t: bit t of qh[l]; qh word i holds l = 4i .. 4i + 3, the slot's l are those of
  // its code words.
  const uvec4 h = mv_words(4u + w + MV_NW * k) >> (2u * c);
  lo |= (h & 0x01010101u) << 4, hi |= (h & 0x02020202u) << 3;
#endif
  return MvRow(lo, hi, vec4(dm.x * mv_float(sc2 & 0xFFu), dm.y * mv_float(mn2 & 0xFFu), dm.x * mv_float(sc2 >> 8),
                            dm.y * mv_float(mn2 >> 8)));
}
float mv_row_dot(const MvRow w, const MvAct a, vec4 xsum) {
  return w.scale.x * mv_dot_run(w.lo, MV_NW, 0.0, a, 0) - w.scale.y * xsum.x +
         w.scale.z * mv_dot_run(w.hi, MV_NW, 0.0, a, MV_NW) - w.scale.w * xsum.y;
}

#else  // Q2_K, Q3_K, Q6_K
#if defined(WTYPE_Q2_K)
vec4 mv_xsum(const MvAct a) {
  return vec4(mv_xsum_block(a, 0), mv_xsum_block(a, 1), mv_xsum_block(a, 2), mv_xsum_block(a, 3));
}
#else
vec4 mv_xsum(const MvAct a) { return vec4(0.0); }
#endif
#if !defined(MV_Q6_RUNS)
// A slot of the runs R = 0..3: run R's code word (bytes that MV_CODE_BIAS is subtracted from), its sub-block's
// scale and (Q2_K) min:                                             w = scale[R] * (code - MV_CODE_BIAS) - min[R]
struct MvRow {
  uvec4 v;
  vec4 scale, mn;
};
#endif

#if defined(WTYPE_Q2_K)
// 84 bytes, word-aligned: scales[16] (lo: scale, hi: min) | qs[64] | f16 d | f16 dmin.      w = (d * sc) * q - dmin * mn
const float MV_CODE_BIAS = 0.0;
MvRow mv_row(uint row_byte, uint s) {
  const uint h = (s >> 3) & 1u, n = s & 7u;
  const uint w = (row_byte >> 2) + 21u * (s >> 4);
  const vec2 dm = unpackHalf2x16(weight_words[w + 20u]);
  const uvec2 sw = uvec2(weight_words[w + 2u * h], weight_words[w + 2u * h + 1u]);  // scales[8h .. 8h + 8)
  const uint q = weight_words[w + 4u + 8u * h + n];
  MvRow r;
  [[unroll]] for (uint R = 0; R < 4u; ++R) {
    const uint sm = mv_byte(sw, 2u * R + (n >> 2));
    r.v[R] = (q >> (2u * R)) & 0x03030303u;
    r.scale[R] = dm.x * mv_float(sm & 0x0Fu);
    r.mn[R] = dm.y * mv_float(sm >> 4);
  }
  return r;
}

#elif defined(WTYPE_Q3_K)
// 110 bytes (start at byte 0 or 2 of a word): hmask[32] | qs[64] | scales[12] | f16 d. Stored code v = low 2 bits |
// hmask bit << 2, q = v - 4; 6-bit scale code of sub-block 8h + m: low nibble h of scales[m], high bits
// 2 * (2h + m / 4) of scales[8 + m % 4]; sc = code - 32.                                      w = (d * sc) * q
const float MV_CODE_BIAS = 4.0;
MvRow mv_row(uint row_byte, uint s) {
  const uint h = (s >> 3) & 1u, n = s & 7u;
  const uint b = row_byte + 110u * (s >> 4);
  const uint hm = mv_load4(b + 4u * n) >> (4u * h);  // bit R of each byte: run R's high bit
  const uint q = mv_load4(b + 32u + 32u * h + 4u * n);
  const uvec2 sl = mv_load8(b + 96u);                // scales[0..8)
  const uint shi = mv_load4(b + 104u);               // scales[8..12)
  const float d = mv_f16(b + 108u);
  MvRow r;
  r.mn = vec4(0.0);
  [[unroll]] for (uint R = 0; R < 4u; ++R) {
    const uint m = 2u * R + (n >> 2);
    const uint code = ((mv_byte(sl, m) >> (4u * h)) & 0x0Fu) | (((shi >> (8u * (m & 3u) + 4u * h + 2u * (R >> 1))) & 3u) << 4);
    r.v[R] = ((q >> (2u * R)) & 0x03030303u) | (((hm >> R) & 0x01010101u) << 2);
    r.scale[R] = d * (mv_float(code) - 32.0);
  }
  return r;
}

#elif defined(WTYPE_Q6_K)
// 210 bytes (start at byte 0 or 2 of a word): ql[128] | qh[64] | int8 scales[16] | f16 d. Run R: low nibble R / 2
// of ql[64h + 32(R % 2) + l], high bits 2R of qh[32h + l], q = code - 32.                     w = (d * sc) * q
#if defined(MV_Q6_RUNS)
// Bytes b .. b + 31 (b even) as 8 words: 8 loads, or 9 and a funnel shift each where b starts mid-word.
void mv_load32(uint b, out uvec4 lo, out uvec4 hi) {
  const uint w = b >> 2;
  const uvec4 v0 = uvec4(weight_words[w], weight_words[w + 1u], weight_words[w + 2u], weight_words[w + 3u]);
  const uvec4 v1 = uvec4(weight_words[w + 4u], weight_words[w + 5u], weight_words[w + 6u], weight_words[w + 7u]);
  if ((b & 2u) == 0u) {
    lo = v0, hi = v1;
    return;
  }
  const uint v2 = weight_words[w + 8u];  // within the block: qh, the later run, ends 18 bytes before it
  lo = (v0 >> 16) | (uvec4(v0.yzw, v1.x) << 16);
  hi = (v1 >> 16) | (uvec4(v1.yzw, v2) << 16);
}
// Slot s (run R of half h): d * xs * (sc0 * (c0 . x0 - 32 s0) + sc1 * (c1 . x1 - 32 s1)) over its two sub-blocks,
// the integer part exact (|sum| < 2^26).
struct MvRow {
  uvec4 lo, hi;  // the run's codes of its two sub-blocks (elements 0..15, 16..31)
  int sc0, sc1;  // their scales
  float d;
};
MvRow mv_row(uint row_byte, uint s) {
  const uint R = s & 3u, h = (s >> 2) & 1u;
  const uint b = row_byte + 210u * (s >> 3);
  uvec4 ql0, ql1, qh0, qh1;
  mv_load32(b + 64u * h + 32u * (R & 1u), ql0, ql1);
  mv_load32(b + 128u + 32u * h, qh0, qh1);
  const uint nibble = 4u * (R >> 1), high = 2u * R;
  const uvec4 c0 = ((ql0 >> nibble) & 0x0F0F0F0Fu) | (((qh0 >> high) & 0x03030303u) << 4);
  const uvec4 c1 = ((ql1 >> nibble) & 0x0F0F0F0Fu) | (((qh1 >> high) & 0x03030303u) << 4);
  const uint o = b + 192u + 8u * h + 2u * R;  // scales[8h + 2R], scales[8h + 2R + 1]: even, so in one word
  const int sw = int(weight_words[o >> 2] >> ((o & 2u) * 8u));
  return MvRow(c0, c1, bitfieldExtract(sw, 0, 8), bitfieldExtract(sw, 8, 8), mv_f16(b + 208u));
}
float mv_row_dot(const MvRow w, const MvAct a, vec4 xsum) {
  const int q = w.sc0 * (mv_idot(w.lo, a, 0) - 32 * a.s[0]) + w.sc1 * (mv_idot(w.hi, a, 4) - 32 * a.s[1]);
  return w.d * (a.d[0] * float(q));
}
#else
const float MV_CODE_BIAS = 32.0;
MvRow mv_row(uint row_byte, uint s) {
  const uint h = (s >> 3) & 1u, n = s & 7u;
  const uint b = row_byte + 210u * (s >> 4);
  const uint ql0 = mv_load4(b + 64u * h + 4u * n), ql1 = mv_load4(b + 64u * h + 32u + 4u * n);
  const uint qh = mv_load4(b + 128u + 32u * h + 4u * n);
  const uvec2 sw = mv_load8(b + 192u + 8u * h);  // scales[8h .. 8h + 8)
  const float d = mv_f16(b + 208u);
  MvRow r;
  r.mn = vec4(0.0);
  [[unroll]] for (uint R = 0; R < 4u; ++R) {
    const uint lo = (((R & 1u) == 0u ? ql0 : ql1) >> (4u * (R >> 1))) & 0x0F0F0F0Fu;
    r.v[R] = lo | (((qh >> (2u * R)) & 0x03030303u) << 4);
    r.scale[R] = d * float(bitfieldExtract(int(mv_byte(sw, 2u * R + (n >> 2))), 0, 8));
  }
  return r;
}
#endif
#endif  // Q2_K, Q3_K, Q6_K
#if !defined(MV_Q6_RUNS)
float mv_row_dot(const MvRow w, const MvAct a, vec4 xsum) {
  float r = 0.0;
  [[unroll]] for (uint R = 0; R < 4u; ++R) {
    r += w.scale[R] * mv_dot(w.v[R], MV_CODE_BIAS, a, R);
#if defined(WTYPE_Q2_K)
    r -= w.mn[R] * xsum[R];
#endif
  }
  return r;
}
#endif
#endif
