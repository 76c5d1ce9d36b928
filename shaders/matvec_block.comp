#version 450
// Block-wise matrix-vector products for the quantized weight types (WTYPE_*): the fast decode path. Same contract
// as matvec.comp (y[t, out_row0 + r] = dot(weight row r, x[t, :]) for the `rows` rows bound at binding 0 and every
// token t = gl_WorkGroupID.y; row groups are a grid-stride loop) for rows whose length is a multiple of 32.
//
// Work split: a row is cut into 32-element units (one legacy block, or one eighth of a 256-element K-quant
// super-block). A workgroup of WG invocations (spec constant 0, a multiple of the subgroup size) owns ROWS
// consecutive rows (spec constant 1, <= 8); invocation i takes units i, i + WG, ... of all ROWS rows. Per unit it
// loads the unit's 32 activations once (8 vec4, reused by every row), then per row reads the unit's quantized words
// and the scales they need exactly once, with aligned 32-bit loads (blocks of 18/22/34/110/210 bytes start at even
// bytes: the words covering the block are read and shifted by 16 bits where the block starts mid-word), and adds
// scale * dot(codes, x) to an f32 partial sum. Codes become floats exactly through the 2^23 trick: the bits
// 0x4B000000 | byte are the float 2^23 + byte, so one OR and one subtraction (which also removes the code's offset,
// e.g. the 8 of Q4_0) replace an integer-to-float conversion. Partial sums are reduced with subgroupAdd, then
// across subgroups through shared memory, as in matvec.comp.
//
// Results equal the reference's f32 dot products up to rounding (sums taken in another order, scales applied per
// block or sub-block); tests/vk/vk_ops_test.cpp holds them to NMSE <= 1e-9.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 4;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };
layout(binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride; } pc;
#include "dequant.glsl"

const uint MAX_ROWS = 8;
const uint MAX_SUBGROUPS = 64;
shared float partial[MAX_ROWS * MAX_SUBGROUPS];

// ---- helpers ---------------------------------------------------------------------------------------------------------

// The 4 bytes of w (each < 2^23) as floats minus `bias`, exactly: float bits 0x4B000000 | b are 2^23 + b.
vec4 mv_bytes(uint w, float bias) {
  return uintBitsToFloat(((uvec4(w) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu) | 0x4B000000u) - (8388608.0 + bias);
}

// Bits 0..3 of n spread to bit 0 of bytes 0..3 (the four products do not overlap, so no carries).
uint mv_spread4(uint n) { return (n * 0x00204081u) & 0x01010101u; }

// Bytes b..b+7 (b even) as two words, reading only the words that hold them.
uvec2 mv_load8(uint b) {
  const uint w = b >> 2;
  const uint v0 = weight_words[w], v1 = weight_words[w + 1u];
  if ((b & 2u) == 0u) return uvec2(v0, v1);
  const uint v2 = weight_words[w + 2u];
  return uvec2((v0 >> 16) | (v1 << 16), (v1 >> 16) | (v2 << 16));
}

// Byte n (0..7) of the 8 bytes in v.
uint mv_byte(uvec2 v, uint n) { return (v[n >> 2] >> (8u * (n & 3u))) & 0xFFu; }

// ---- per type: the unit's activations (x4 index of its k-th vec4, k < 8), their sums, the unit's dot product ----
// mv_xsum(xs): the sums of x that the type's offsets/mins multiply (computed once per unit, shared by the rows).
// mv_unit_dot(row_byte, u, xs, xsum): dot(weights of unit u of the row at row_byte, the unit's activations).

#if defined(WTYPE_Q4_0) || defined(WTYPE_Q4_1) || defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1) || defined(WTYPE_Q8_0)
// Legacy blocks: unit = block u; x element 4k + i of the block = component i of xs[k].
#define MV_UNITS_PER_BLOCK 1u
uint mv_x4(uint u, uint k) { return 8u * u + k; }
#if defined(WTYPE_Q4_1) || defined(WTYPE_Q5_1)
vec4 mv_xsum(const vec4 xs[8]) {
  vec4 s = xs[0];
  for (uint k = 1; k < 8; ++k) s += xs[k];
  return vec4(s.x + s.y + s.z + s.w, 0.0, 0.0, 0.0);
}
#else
vec4 mv_xsum(const vec4 xs[8]) { return vec4(0.0); }
#endif

#if defined(WTYPE_Q4_0) || defined(WTYPE_Q5_0) || defined(WTYPE_Q8_0)
// 18 / 22 / 34-byte blocks (4N - 2 bytes) start at byte 0 or 2 of a word: the N words v[0..N) cover the block either
// way. Bytes 2 + 4k .. 5 + 4k of the block (the k-th word after the f16 d):
#define MV_HW(k) (odd ? v[(k) + 1] : (v[k] >> 16) | (v[(k) + 1] << 16))
#endif

#if defined(WTYPE_Q4_0)
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint b = row_byte + 18u * u, w = b >> 2;
  const bool odd = (b & 2u) != 0u;
  uint v[5];
  for (uint i = 0; i < 5u; ++i) v[i] = weight_words[w + i];
  const float d = unpackHalf2x16(odd ? v[0] >> 16 : v[0]).x;
  float s = 0.0;
  for (uint k = 0; k < 4u; ++k) {
    const uint q = MV_HW(k);  // qs[4k..4k+3]: lo nibbles = elements 4k.., hi nibbles = elements 16 + 4k..
    s += dot(mv_bytes(q & 0x0F0F0F0Fu, 8.0), xs[k]) + dot(mv_bytes((q >> 4) & 0x0F0F0F0Fu, 8.0), xs[k + 4u]);
  }
  return d * s;
}

#elif defined(WTYPE_Q5_0)
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint b = row_byte + 22u * u, w = b >> 2;
  const bool odd = (b & 2u) != 0u;
  uint v[6];
  for (uint i = 0; i < 6u; ++i) v[i] = weight_words[w + i];
  const float d = unpackHalf2x16(odd ? v[0] >> 16 : v[0]).x;
  const uint qh = MV_HW(0);
  float s = 0.0;
  for (uint k = 0; k < 4u; ++k) {
    const uint q = MV_HW(k + 1u);
    const uint lo = (q & 0x0F0F0F0Fu) | (mv_spread4((qh >> (4u * k)) & 0xFu) << 4);
    const uint hi = ((q >> 4) & 0x0F0F0F0Fu) | (mv_spread4((qh >> (16u + 4u * k)) & 0xFu) << 4);
    s += dot(mv_bytes(lo, 16.0), xs[k]) + dot(mv_bytes(hi, 16.0), xs[k + 4u]);
  }
  return d * s;
}

#elif defined(WTYPE_Q8_0)
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint b = row_byte + 34u * u, w = b >> 2;
  const bool odd = (b & 2u) != 0u;
  uint v[9];
  for (uint i = 0; i < 9u; ++i) v[i] = weight_words[w + i];
  const float d = unpackHalf2x16(odd ? v[0] >> 16 : v[0]).x;
  float s = 0.0;
  for (uint k = 0; k < 8u; ++k) s += dot(mv_bytes(MV_HW(k) ^ 0x80808080u, 128.0), xs[k]);  // int8 + 128
  return d * s;
}

#elif defined(WTYPE_Q4_1)
// 20-byte blocks: rows are whole words, so every block is word-aligned.
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint w = (row_byte + 20u * u) >> 2;
  const vec2 dm = unpackHalf2x16(weight_words[w]);
  float s = 0.0;
  for (uint k = 0; k < 4u; ++k) {
    const uint q = weight_words[w + 1u + k];
    s += dot(mv_bytes(q & 0x0F0F0F0Fu, 0.0), xs[k]) + dot(mv_bytes((q >> 4) & 0x0F0F0F0Fu, 0.0), xs[k + 4u]);
  }
  return dm.x * s + dm.y * xsum.x;
}

#elif defined(WTYPE_Q5_1)
// 24-byte blocks, word-aligned.
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint w = (row_byte + 24u * u) >> 2;
  const vec2 dm = unpackHalf2x16(weight_words[w]);
  const uint qh = weight_words[w + 1u];
  float s = 0.0;
  for (uint k = 0; k < 4u; ++k) {
    const uint q = weight_words[w + 2u + k];
    const uint lo = (q & 0x0F0F0F0Fu) | (mv_spread4((qh >> (4u * k)) & 0xFu) << 4);
    const uint hi = ((q >> 4) & 0x0F0F0F0Fu) | (mv_spread4((qh >> (16u + 4u * k)) & 0xFu) << 4);
    s += dot(mv_bytes(lo, 0.0), xs[k]) + dot(mv_bytes(hi, 0.0), xs[k + 4u]);
  }
  return dm.x * s + dm.y * xsum.x;
}
#endif

#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// Unit u = super-block u / 8, sub = u % 8: chunk c = sub / 2 (64 elements, sub-blocks 2c and 2c + 1), half hh = sub % 2:
// elements 64c + 16hh + (0..15) (low nibbles of qs[32c + 16hh ..][16]) and 64c + 32 + 16hh + (0..15) (high nibbles
// of the same bytes). xs[0..4) are the first 16, xs[4..8) the second. Blocks (144 / 176 bytes) are word-aligned.
#define MV_UNITS_PER_BLOCK 8u
uint mv_x4(uint u, uint k) {
  const uint sub = u & 7u;
  return 64u * (u >> 3) + 16u * (sub >> 1) + 4u * (sub & 1u) + k + (k & 4u);
}
vec4 mv_xsum(const vec4 xs[8]) {
  const vec4 a = xs[0] + xs[1] + xs[2] + xs[3], b = xs[4] + xs[5] + xs[6] + xs[7];
  return vec4(a.x + a.y + a.z + a.w, b.x + b.y + b.z + b.w, 0.0, 0.0);
}
#if defined(WTYPE_Q4_K)
#define MV_BLOCK_WORDS 36u
#define MV_QS_WORD 4u
#else
#define MV_BLOCK_WORDS 44u
#define MV_QS_WORD 12u
#endif
// Byte n (0..11) of the scales.
#define MV_SC(n) ((sw[(n) >> 2] >> (8u * ((n) & 3u))) & 0xFFu)
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint sub = u & 7u, c = sub >> 1, hh = sub & 1u;
  const uint w = (row_byte >> 2) + MV_BLOCK_WORDS * (u >> 3);
  const vec2 dm = unpackHalf2x16(weight_words[w]);
  const uvec3 sw = uvec3(weight_words[w + 1u], weight_words[w + 2u], weight_words[w + 3u]);
  uint q[4];
  for (uint k = 0; k < 4u; ++k) q[k] = weight_words[w + MV_QS_WORD + 8u * c + 4u * hh + k];
#if defined(WTYPE_Q5_K)
  uint qh[4];  // bit s of qh[l] = fifth bit of element l of sub-block s
  for (uint k = 0; k < 4u; ++k) qh[k] = weight_words[w + 4u + 4u * hh + k];
#endif
  // Scale and min codes of sub-blocks s0 = 2c and s1 = 2c + 1 (quant_blocks.h: unpack_scale_min_k4).
  const uint s0 = 2u * c, s1 = s0 + 1u;
  uint sc0, mn0, sc1, mn1;
  if (c < 2u) {
    sc0 = MV_SC(s0) & 63u, mn0 = MV_SC(s0 + 4u) & 63u;
    sc1 = MV_SC(s1) & 63u, mn1 = MV_SC(s1 + 4u) & 63u;
  } else {
    sc0 = (MV_SC(s0 + 4u) & 0x0Fu) | ((MV_SC(s0 - 4u) >> 6) << 4), mn0 = (MV_SC(s0 + 4u) >> 4) | ((MV_SC(s0) >> 6) << 4);
    sc1 = (MV_SC(s1 + 4u) & 0x0Fu) | ((MV_SC(s1 - 4u) >> 6) << 4), mn1 = (MV_SC(s1 + 4u) >> 4) | ((MV_SC(s1) >> 6) << 4);
  }
  float a = 0.0, b = 0.0;
  for (uint k = 0; k < 4u; ++k) {
    uint lo = q[k] & 0x0F0F0F0Fu, hi = (q[k] >> 4) & 0x0F0F0F0Fu;
#if defined(WTYPE_Q5_K)
    lo |= ((qh[k] >> s0) & 0x01010101u) << 4;
    hi |= ((qh[k] >> s1) & 0x01010101u) << 4;
#endif
    a += dot(mv_bytes(lo, 0.0), xs[k]);
    b += dot(mv_bytes(hi, 0.0), xs[k + 4u]);
  }
  return (dm.x * float(sc0)) * a - (dm.y * float(mn0)) * xsum.x + (dm.x * float(sc1)) * b -
         (dm.y * float(mn1)) * xsum.y;
}
#undef MV_SC

#elif defined(WTYPE_Q2_K) || defined(WTYPE_Q3_K) || defined(WTYPE_Q6_K)
// Unit u = super-block u / 8, sub = u % 8: half h = sub / 4, m = sub % 4: elements 128h + 32R + 8m + (0..7) for the
// four runs R = 0..3 (the 2-bit interleaving of quant_blocks.h: all four sit in the same 8 code bytes, at shifts
// 2R); xs[2R], xs[2R + 1] hold run R. Sub-block of run R: s = 8h + 2R + m / 2.
#define MV_UNITS_PER_BLOCK 8u
uint mv_x4(uint u, uint k) {
  const uint sub = u & 7u;
  return 64u * (u >> 3) + 32u * (sub >> 2) + 2u * (sub & 3u) + 8u * (k >> 1) + (k & 1u);
}
#if defined(WTYPE_Q2_K)
vec4 mv_xsum(const vec4 xs[8]) {
  vec4 r;
  for (uint i = 0; i < 4u; ++i) {
    const vec4 a = xs[2u * i] + xs[2u * i + 1u];
    r[i] = a.x + a.y + a.z + a.w;
  }
  return r;
}
#else
vec4 mv_xsum(const vec4 xs[8]) { return vec4(0.0); }
#endif

#if defined(WTYPE_Q2_K)
// 84-byte blocks, word-aligned: scales[16] words 0..3, qs words 4..19, d/dmin word 20.
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint sub = u & 7u, h = sub >> 2, m = sub & 3u;
  const uint w = (row_byte >> 2) + 21u * (u >> 3);
  const vec2 dm = unpackHalf2x16(weight_words[w + 20u]);
  const uvec2 sw = uvec2(weight_words[w + 2u * h], weight_words[w + 2u * h + 1u]);  // scales[8h .. 8h + 8)
  const uvec2 qw = uvec2(weight_words[w + 4u + 8u * h + 2u * m], weight_words[w + 5u + 8u * h + 2u * m]);
  float r = 0.0;
  for (uint R = 0; R < 4u; ++R) {
    const uint sm = mv_byte(sw, 2u * R + (m >> 1));
    const uvec2 q = (qw >> (2u * R)) & 0x03030303u;
    const float s = dot(mv_bytes(q.x, 0.0), xs[2u * R]) + dot(mv_bytes(q.y, 0.0), xs[2u * R + 1u]);
    r += (dm.x * float(sm & 0x0Fu)) * s - (dm.y * float(sm >> 4)) * xsum[R];
  }
  return r;
}

#elif defined(WTYPE_Q3_K)
// 110-byte blocks (start at byte 0 or 2 of a word): hmask[32] at 0, qs[64] at 32, scales[12] at 96, f16 d at 108.
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint sub = u & 7u, h = sub >> 2, m = sub & 3u;
  const uint b = row_byte + 110u * (u >> 3);
  const float d = read_f16(b + 108u);
  const uvec2 hm = mv_load8(b + 8u * m);               // hmask[8m ..]: bit 4h + R = high bit of run R
  const uvec2 qw = mv_load8(b + 32u + 32u * h + 8u * m);
  const uvec2 sl = mv_load8(b + 96u);                  // scales[0..8): low nibbles (nibble h)
  const uint shi = read_u32_unaligned(b + 104u);       // scales[8..12): high bits
  float r = 0.0;
  for (uint R = 0; R < 4u; ++R) {
    const uint n = 2u * R + (m >> 1);  // s = 8h + n; s % 4 = n % 4, s / 4 = 2h + R / 2
    const uint lo4 = (mv_byte(sl, n) >> (4u * h)) & 0x0Fu;
    const uint hi2 = (shi >> (8u * (n & 3u) + 2u * (2u * h + (R >> 1)))) & 3u;
    const int sc = int(lo4 | (hi2 << 4)) - 32;
    const uvec2 v = ((qw >> (2u * R)) & 0x03030303u) | (((hm >> (4u * h + R)) & 0x01010101u) << 2);  // code + 4
    const float s = dot(mv_bytes(v.x, 4.0), xs[2u * R]) + dot(mv_bytes(v.y, 4.0), xs[2u * R + 1u]);
    r += (d * float(sc)) * s;
  }
  return r;
}

#elif defined(WTYPE_Q6_K)
// 210-byte blocks (start at byte 0 or 2 of a word): ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, f16 d at 208.
// Run R: low nibble R / 2 of ql[64h + 32(R & 1) + l], high bits 2R of qh[32h + l], code - 32.
float mv_unit_dot(uint row_byte, uint u, const vec4 xs[8], vec4 xsum) {
  const uint sub = u & 7u, h = sub >> 2, m = sub & 3u;
  const uint b = row_byte + 210u * (u >> 3);
  const float d = read_f16(b + 208u);
  const uvec2 qa = mv_load8(b + 64u * h + 8u * m);        // runs 0 (lo), 2 (hi)
  const uvec2 qb = mv_load8(b + 64u * h + 32u + 8u * m);  // runs 1 (lo), 3 (hi)
  const uvec2 qh = mv_load8(b + 128u + 32u * h + 8u * m);
  const uvec2 sw = mv_load8(b + 192u + 8u * h);           // scales[8h .. 8h + 8)
  float r = 0.0;
  for (uint R = 0; R < 4u; ++R) {
    const int sc = bitfieldExtract(int(mv_byte(sw, 2u * R + (m >> 1))), 0, 8);
    const uvec2 lo = (((R & 1u) == 0u ? qa : qb) >> (4u * (R >> 1))) & 0x0F0F0F0Fu;
    const uvec2 v = lo | (((qh >> (2u * R)) & 0x03030303u) << 4);
    const float s = dot(mv_bytes(v.x, 32.0), xs[2u * R]) + dot(mv_bytes(v.y, 32.0), xs[2u * R + 1u]);
    r += (d * float(sc)) * s;
  }
  return r;
}
#endif

#else
#error "matvec_block.comp: quantized weight types only (f32/f16/bf16 use matvec.comp)"
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint t = gl_WorkGroupID.y;
  const uint x4_base = t * (pc.cols >> 2);
  const uint units = pc.cols >> 5;
  const uint row_groups = (pc.rows + ROWS - 1) / ROWS;
  for (uint rg = gl_WorkGroupID.x; rg < row_groups; rg += gl_NumWorkGroups.x) {
    const uint row0 = rg * ROWS;
    float acc[MAX_ROWS];
    for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
    for (uint u = tid; u < units; u += wg) {
      vec4 xs[8];
      for (uint k = 0; k < 8u; ++k) xs[k] = x4[x4_base + mv_x4(u, k)];
      const vec4 xsum = mv_xsum(xs);
      // Rows past the end (the last group) repeat the last row; their sums are not written.
      for (uint r = 0; r < ROWS; ++r) acc[r] += mv_unit_dot(min(row0 + r, pc.rows - 1u) * pc.row_bytes, u, xs, xsum);
    }
    for (uint r = 0; r < ROWS; ++r) {
      const float s = subgroupAdd(acc[r]);
      if (subgroupElect()) partial[r * MAX_SUBGROUPS + gl_SubgroupID] = s;
    }
    barrier();
    if (tid < ROWS && row0 + tid < pc.rows) {
      float s = 0.0;
      for (uint i = 0; i < gl_NumSubgroups; ++i) s += partial[tid * MAX_SUBGROUPS + i];
      y[t * pc.out_stride + pc.out_row0 + row0 + tid] = s;
    }
    barrier();  // partial[] is reused by the next row group
  }
}
