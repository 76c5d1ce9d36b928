#version 450
// Matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix, 16x16x16 f16 x f16 -> f32) for one
// weight type (WTYPE_*): the same contract as matmul_tiled.comp,
//   y[t, out_row0 + r] = dot(weight row r, x[t, :])   C[M=tokens, N=rows] = X[M, K] * W[N, K]^T, K % 4 == 0.
//
// Tiling: a workgroup of KG x WM x WN subgroups (spec constants 11, 3 and 4; local size = KG * WM * WN * the subgroup
// size, spec constant 0; the host pins the subgroup size and requires full subgroups) computes a BM x BN tile of C
// (spec constants 1 and 2); subgroup s of K group g = s / (WM WN) owns the (BM/WM) x (BN/WN) block
// (s' / WN, s' % WN), s' = s % (WM WN), as FM x FN (each <= 4) accumulator fragments of 16 x 16, over the 16-column
// slices g, g + KG, ... of each K step. KG > 1 multiplies a workgroup's subgroups without shrinking their blocks:
// the default (128x128x2x4x64x2) has 16 subgroups of 4 x 2 fragments, enough to hide latency with one workgroup per
// SM (512 x 4096 on 128 x 128 tiles is 128 workgroups), with fewer shared-memory reads per multiply-add than 2 x 2
// fragments; the groups' accumulators are summed through shared memory at the end.
// K advances in steps of BK (spec constant 6, a multiple of 16): X[BM, BK]
// (converted to f16) and the dequantized W[BN, BK] (f16) are staged in shared memory as uvec4 (8 halves), both
// row-major by their M / N index with a padded stride of LDS uvec4 (80 bytes for BK = 32: 8 consecutive fragment rows
// then fall in 8 distinct groups of 4 banks), so W's tile read column-major is exactly B = W^T [K, N].
// Pipelining: shared memory holds two stages (STAGES, spec constant 12, where they fit the device). While the
// subgroups multiply stage s, each invocation's global loads for the K step DEPTH steps ahead are in flight as raw
// words in registers (load_*_raw: no use of the data, so nothing waits for them); after its multiply-adds it decodes
// the next step's words (decode_*: dequantization, zeros past the matrix) into stage s ^ 1, and one barrier per K step
// publishes them (stage s ^ 1 was last read before the previous step's barrier). With one stage (the default 128 x 128
// tile at BK 64: 36 KiB, 72 in two) a second barrier, after the multiply-adds, guards the stores. A K step of 64
// rather than 32 halves the load instructions per multiply-add, which is what the loop waits on (op_matmul.cpp).
// The per-subgroup f32 tiles that edge blocks use at the end alias the stages (after the loop's last barrier).
// Fragments are named variables (a0..a3, b0..b3, c00..c33) guarded by spec-constant conditions, not arrays indexed
// in loops: on the NVIDIA H100 driver, arrays of cooperative matrices with spec-constant loop bounds ran the
// multiply-adds at ~28 TFLOP/s, named fragments at 63 (same tile, f16, 4096^3).
// Full 16 x 16 output blocks are stored straight to y; blocks at the matrix edges go through a per-subgroup
// 16 x 16 f32 staging tile with bounds checks.
//
// MOE (moe_coopmat_<type>): the grouped expert GEMM of engine::MoeMatMulOp over moe_group.comp's tiles. Workgroup y
// is tile y (past the step's tile count: returns at once): expert e's slots sorted[first .. first + count), count <=
// BM, are the rows of X (slot s reads input row s / k, or s with per_slot), the expert's rows e * rows .. + rows of
// the bound weight (n_experts * rows rows) are W, and C's rows go back to their slots' rows of y (+ bias[e]) through
// the staging tile. No split-K, no accumulate, one K group.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
#if defined(WTYPE_F16) || defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
layout(binding = 0) readonly buffer WeightVec { uvec4 weight_vec[]; };  // the same buffer in 16-byte words
#endif
#if defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
layout(binding = 0) readonly buffer WeightPair { uvec2 weight_pair[]; };  // and in 8-byte words
#endif
#if defined(X_F16)
// X already f16 (convert_f16.comp), 8 halves per uvec4; the host rounds the buffer up to whole uvec4.
layout(binding = 1) readonly buffer X { uvec4 xh[]; };
#else
layout(binding = 1) readonly buffer X { vec4 x4[]; };  // K % 4 == 0: every row of X starts on a vec4
#endif
layout(binding = 2) buffer Y { float y[]; };
// SPLIT_K > 1: split z > 0 writes its partial C[M, N] (row stride N = pc.rows) at (z - 1) * partial_stride() here,
// and the host adds the partials into y afterwards (op_matmul.cpp). With SPLIT_K == 1 the host binds y again (never
// touched).
layout(binding = 3) buffer Partial { float part[]; };
#if defined(MOE)
layout(binding = 4) readonly buffer Sorted { uint sorted[]; };  // moe_group.comp's slot lists and tiles
layout(binding = 5) readonly buffer Tiles { uint tiles[]; };
layout(binding = 6) readonly buffer Bias { float bias[]; };     // [n_experts, rows] when has_bias
#endif
layout(push_constant) uniform Push {
  uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride; uint n_tokens;
#if defined(MOE)
  uint k; uint per_slot; uint has_bias; uint weight_rows;
#endif
} pc;
#if defined(MOE)
#define WEIGHT_ROWS pc.weight_rows
#else
#define WEIGHT_ROWS pc.rows
#endif
#include "dequant.glsl"

layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint WM = 2;
layout(constant_id = 4) const uint WN = 2;
layout(constant_id = 5) const bool ACCUMULATE = false;  // y += W x (a fused residual add) instead of y = W x
layout(constant_id = 6) const uint BK = 32;  // a multiple of 16
layout(constant_id = 7) const uint DEPTH = 2;  // K steps between a load's issue and its store: 1, 2 or 3
// K % BK != 0: the last K step is partial (elements past K are zeros). false lets the loads skip every K check.
layout(constant_id = 8) const bool K_TAIL = true;
// K % 8 != 0 (X_F16): an item's 8 halves may straddle two uvec4 of X. false keeps one 16-byte load per item.
layout(constant_id = 9) const bool X_SPLIT = true;
// Split-K: workgroup z of the grid's SPLIT_K multiplies K steps [z * KC, (z + 1) * KC) (KC: K / SPLIT_K rounded up to
// whole K steps). Fills the device when the tiles of C are too few (512 x 4096 on 128 x 128 tiles: 128 workgroups).
layout(constant_id = 10) const uint SPLIT_K = 1;
layout(constant_id = 11) const uint KG = 1;  // K groups of WM x WN subgroups (BK % (16 KG) == 0)
// Shared-memory stages: 2 where they fit the device, else 1 (a second barrier per K step, before the next step's
// stores). BK 64 on 128 x 128 fits only once in 48 KiB.
layout(constant_id = 12) const uint STAGES = 2;
const uint SM = BM / WM, SN = BN / WN;  // one subgroup's block of C
const uint FM = SM / 16, FN = SN / 16;  // its fragments along M and N (the host keeps both <= 4)
const uint G = BK / 8;                  // uvec4 (8 halves) per staged row
const uint LDS = G + 1;                 // row stride in uvec4: odd, so 16-byte fragment rows hit distinct banks
const uint WG = gl_WorkGroupSize.x;
// W is staged in units of one uvec4 of a row, or two for Q6_K on K steps of a multiple of 64 (W_PAIRED): columns c
// and c + 4 of 8 halves, elements j and j + 32 of a super-block with j % 64 < 32, whose 6-bit codes share their
// high-bit bytes (qh), their d and often a scale word. A pair loads 12 words where two single units load 16.
#if defined(WTYPE_Q6_K)
const bool W_PAIRED = G % 8u == 0u;
#else
const bool W_PAIRED = false;
#endif
const uint WU = W_PAIRED ? G / 2u : G;  // W units per staged row
const uint W_ITEMS = (BN * WU + WG - 1) / WG;  // W units staged per invocation and K step (host: <= 4 uvec4)
const uint X_ITEMS = (BM * G + WG - 1) / WG;
const uint XS = BM * LDS;  // one stage: X rows [0, XS), then W rows
const uint STAGE = XS + BN * LDS;
const uint STAGE1 = STAGES == 2u ? STAGE : 0u;  // where stage 1 starts (the same space with one stage)
// The edge tiles: 16 x 16 f32 = 64 uvec4 per subgroup; the K groups' sum: one fragment row (FN fragments) of every
// subgroup of groups 1..KG-1 at a time.
const uint CS_EDGE = WM * WN * 64, CS_SUM = (KG - 1) * WM * WN * FN * 64;
const uint CS = CS_EDGE > CS_SUM ? CS_EDGE : CS_SUM;
shared uvec4 smem[STAGES * STAGE > CS ? STAGES * STAGE : CS];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// Floats between two splits' partials: M * N rounded up to 64 (256 bytes), so each partial can be bound on its own
// at any storage-buffer offset alignment (the host computes the same).
uint partial_stride() { return (pc.n_tokens * pc.rows + 63u) / 64u * 64u; }

// The 4 bytes starting `shift` (0 or 16) bits into word x: x itself, or its upper half and the lower half of y.
uint funnel16(uint x, uint y, uint shift) { return shift == 0u ? x : (x >> 16) | (y << 16); }

// The low nibbles of t's bytes 0 and 1 in bits 0-3 and 16-19: two 4-bit codes, one per f16 half.
uint nibble_pair(uint t) { return (t & 0x0Fu) | ((t << 8) & 0x000F0000u); }

// Two codes of up to 10 bits (bits 0-9 and 16-25 of q) as f16 values minus `offset`: a code in the mantissa of 1024
// (0x6400) is 1024 + code exactly, so with offset 1024 + c the result is code - c exactly (two per instruction).
f16vec2 codes_minus(uint q, float16_t offset) {
  precise const f16vec2 v = unpackFloat2x16(q | 0x64006400u) - f16vec2(offset);
  return v;
}

#if defined(WTYPE_Q8_0)
// Two Q8_0 elements, the signed bytes 0 and 1 of t, as q * d in f16 arithmetic: the code q + 128 (the byte with its
// sign bit flipped) at offset 1152 = 1024 + 128 gives q exactly (codes_minus), and the product with d rounds once,
// to the same half as the f32 product (exact: 8 x 11 bits) rounded by packHalf2x16 (H200, us: 512x14336x4096
// 417 -> 397, 512x4096x4096 114 -> 107, 16x4096x4096 26.0 -> 24.0; NMSE unchanged).
uint q8_0_pair(uint t, f16vec2 d) {
  const uint q = ((t & 0xFFu) | ((t << 8) & 0x00FF0000u)) ^ 0x00800080u;
  precise const f16vec2 w = codes_minus(q, float16_t(1152.0)) * d;
  return packFloat2x16(w);
}
#endif

#if defined(WTYPE_Q4_0)
// Two Q4_0 elements, the low nibbles of t's bytes 0 and 1, as (q - 8) * d in f16 arithmetic (codes_minus: q - 8
// exactly), and the product with d rounds once, to the same half as dequant.glsl's f32 product rounded by packHalf2x16.
uint q4_0_pair(uint t, f16vec2 d) {
  precise const f16vec2 w = codes_minus(nibble_pair(t), float16_t(1032.0)) * d;
  return packFloat2x16(w);
}
#endif

#if defined(WTYPE_Q6_K)
// Two Q6_K elements, 6-bit codes from the low nibbles of l's bytes 0 and 1 and the low 2 bits of h's, as (q - 32) * ds
// in f16 arithmetic (codes_minus: q - 32 exactly); the product rounds once.
uint q6_k_pair(uint l, uint h, f16vec2 ds) {
  const uint q = nibble_pair(l) | (((h & 0x03u) | ((h << 8) & 0x00030000u)) << 4);
  return packFloat2x16(codes_minus(q, float16_t(1056.0)) * ds);
}
// Eight consecutive Q6_K elements (a staged uvec4): the low nibbles of lo0, lo1's bytes and the low 2 bits of hi0,
// hi1's bytes, two per q6_k_pair.
uvec4 q6_k_eight(uint lo0, uint lo1, uint hi0, uint hi1, f16vec2 ds) {
  return uvec4(q6_k_pair(lo0, hi0, ds), q6_k_pair(lo0 >> 16, hi0 >> 16, ds), q6_k_pair(lo1, hi1, ds),
               q6_k_pair(lo1 >> 16, hi1 >> 16, ds));
}
// The signed scale byte at byte offset `at` (any alignment) of the row, from the word holding it.
int q6_k_scale(uint word, uint at) { return bitfieldExtract(int(word >> ((at & 3u) * 8u)), 0, 8); }
#endif

#if defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// Two Q4_K elements, the low nibbles of t's bytes 0 and 1, as q * d1 - m1 in f16 arithmetic (codes_minus: q exactly);
// the fma rounds once. Q5_K: bit 0 of h's bytes 0 and 1 is the codes' fifth bit.
uint q4_k_pair(uint t, f16vec2 d1, f16vec2 m1) {
  return packFloat2x16(fma(codes_minus(nibble_pair(t), float16_t(1024.0)), d1, -m1));
}
uint q5_k_pair(uint t, uint h, f16vec2 d1, f16vec2 m1) {
  const uint q = nibble_pair(t) | (((h & 0x01u) | ((h << 8) & 0x00010000u)) << 4);
  return packFloat2x16(fma(codes_minus(q, float16_t(1024.0)), d1, -m1));
}
#endif

uvec4 pack8(vec4 lo, vec4 hi) {
  return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
}

#if defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS) || defined(WTYPE_MXFP4)
// 8 table-format elements, the codes in the low nibbles of lo's and hi's bytes, as table[q] * scale rounded to f16
// (dequant.glsl's expression).
uvec4 lut8(uint lo, uint hi, float scale) {
  precise const vec4 a = dq_lut(dq_bytes(lo) & 0x0Fu) * scale, b = dq_lut(dq_bytes(hi) & 0x0Fu) * scale;
  return pack8(a, b);
}
#endif

// ---- staging loads, split in two --------------------------------------------------------------------------------
// load_*_raw issues the global loads of one staged uvec4 (8 halves of a row) into registers and does nothing with
// the data; decode_* turns those words into 8 halves after the K step's multiply-adds. A load whose data were used
// before the multiply-adds would stall the subgroup there (measured: the global loads cost 2-3x the kernel's time
// when decoded at once). Loads are branch-free: indices are clamped into the matrix, and decode_* zeroes elements
// past it. K % 4 == 0, so the second half of the 8 is either wholly inside the row or wholly past it.
struct Raw {
  uvec4 a;
  uvec4 b;
#if defined(WTYPE_Q6_K)
  uvec4 c;  // a W_PAIRED unit's third 4 words
#endif
};

// `row`: the byte offset of the (clamped) weight row.
Raw load_w_raw(uint row, uint k) {
  if (K_TAIL) k = k < pc.cols ? k : 0u;
  Raw r;
  r.b = uvec4(0u);
#if defined(WTYPE_F16)
  // Rows of a multiple of 16 bytes (K % 8 == 0): one 16-byte load; else 8-byte aligned words.
  const uint b = row + 2u * k;
  if ((pc.row_bytes & 15u) == 0u) {
    r.a = weight_vec[b >> 4];
  } else {
    const uint w = b >> 2;
    const bool whole = !K_TAIL || k + 4u < pc.cols;
    r.a = uvec4(weight_words[w], weight_words[w + 1u], whole ? weight_words[w + 2u] : 0u,
                whole ? weight_words[w + 3u] : 0u);
  }
#elif defined(WTYPE_Q4_0) || defined(WTYPE_IQ4_NL)
  // Q4_0 (and IQ4_NL) blocks of 18 bytes are 2-byte aligned: the word holding d, and the 3 words covering the 8 code
  // bytes qs[j & 15 ..] (low nibbles for j < 16, high for j >= 16; j = k % 32 is 0, 8, 16 or 24).
  const uint blk = row + (k >> 5) * 18u, cb = blk + 2u + (k & 15u);
  const uint last = (WEIGHT_ROWS * pc.row_bytes - 1u) >> 2;  // the chunk's last word: the third word may pass the end
  r.a = uvec4(weight_words[blk >> 2], weight_words[cb >> 2], weight_words[(cb >> 2) + 1u],
              weight_words[min((cb >> 2) + 2u, last)]);
#elif defined(WTYPE_Q4_K)
  // Q4_K super-blocks of 144 bytes keep rows 16-byte aligned: one 16-byte load of d, dmin and the 12 scale bytes,
  // and the 2 words of the 8 elements' codes.
  const uint blk = (row >> 4) + (k >> 8) * 9u, j = k & 255u;
  r.a = weight_vec[blk];
  // The codes' word q0 is even (j % 8 == 0): one 8-byte load, not two of 4 (on the H200, prefill GEMMs 4-5 % faster;
  // the 16-token GEMM, bound by the loads' latency rather than their issue, unchanged: docs/benchmarks.md).
  const uint q0 = blk * 4u + 4u + 8u * (j >> 6) + ((j & 31u) >> 2);
  r.b.xy = weight_pair[q0 >> 1];
#elif defined(WTYPE_Q5_K)
  // Q5_K super-blocks of 176 bytes, rows 16-byte aligned as Q4_K's: the 16-byte load of d, dmin and the scales, one
  // 8-byte load of the 8 elements' codes (qs from byte 48) and one of their fifth bits (qh[l .. l + 8), byte 16 + l).
  const uint blk = (row >> 4) + (k >> 8) * 11u, j = k & 255u;
  r.a = weight_vec[blk];
  r.b.xy = weight_pair[(blk * 4u + 12u + 8u * (j >> 6) + ((j & 31u) >> 2)) >> 1];
  r.b.zw = weight_pair[(blk * 4u + 4u + ((j & 31u) >> 2)) >> 1];
#elif defined(WTYPE_Q8_0)
  // Q8_0 blocks of 34 bytes are 2-byte aligned: the word holding d, and the 3 words covering qs[j .. j + 7].
  const uint blk = row + (k >> 5) * 34u, cb = blk + 2u + (k & 31u);
  const uint last = (WEIGHT_ROWS * pc.row_bytes - 1u) >> 2;  // the chunk's last word: the third word may pass the end
  r.a = uvec4(weight_words[blk >> 2], weight_words[cb >> 2], weight_words[(cb >> 2) + 1u],
              weight_words[min((cb >> 2) + 2u, last)]);
#elif defined(WTYPE_Q6_K)
  // Q6_K blocks of 210 bytes are 2-byte aligned (dequant.glsl has the layout): the 3 words covering each of the 8
  // low-nibble bytes (ql) and the 8 high-bit bytes (qh) of the elements, the word holding their sub-block's scale and
  // the word holding d, all inside the block but d's, which may pass it by 2 bytes (as dequant.glsl's reads do).
  const uint blk = row + (k >> 8) * 210u, j = k & 255u, h = j >> 7, rr = (j & 127u) >> 5, l = j & 31u;
  const uint ql = (blk + 64u * h + 32u * (rr & 1u) + l) >> 2, qh = (blk + 128u + 32u * h + l) >> 2;
  const uint sb = blk + 192u + (j >> 4);
  r.a = uvec4(weight_words[ql], weight_words[ql + 1u], weight_words[ql + 2u], weight_words[qh]);
  if (W_PAIRED) {
    // rr is even: the partner (rr + 1) has its low nibbles 32 bytes on, its scale 2 bytes on (the word holding it, so
    // no load leaves the block), the same qh bytes and d.
    const uint ql1 = ql + 8u;
    r.b = uvec4(weight_words[qh + 1u], weight_words[qh + 2u], weight_words[sb >> 2], weight_words[(sb + 2u) >> 2]);
    r.c = uvec4(weight_words[ql1], weight_words[ql1 + 1u], weight_words[ql1 + 2u], weight_words[(blk + 208u) >> 2]);
  } else {
    r.b = uvec4(weight_words[qh + 1u], weight_words[qh + 2u], weight_words[sb >> 2], weight_words[(blk + 208u) >> 2]);
  }
#elif defined(WTYPE_MXFP4)
  // MXFP4 blocks of 17 bytes start at any byte: the word holding the exponent byte, and the 3 words covering the 8
  // code bytes qs[j & 15 ..] (low nibbles for j < 16, high for j >= 16), as Q4_0's.
  const uint blk = row + (k >> 5) * 17u, cb = blk + 1u + (k & 15u);
  const uint last = (WEIGHT_ROWS * pc.row_bytes - 1u) >> 2;  // the chunk's last word: the third may pass the end
  r.a = uvec4(weight_words[blk >> 2], weight_words[cb >> 2], weight_words[(cb >> 2) + 1u],
              weight_words[min((cb >> 2) + 2u, last)]);
#elif defined(WTYPE_Q4_1) || defined(WTYPE_Q5_1)
  // Q4_1 (20 bytes) and Q5_1 (24) blocks are word-aligned: the word of d and m, Q5_1's word of fifth bits (qh), and
  // the 2 words of the 8 elements' codes (qs[j & 15 ..]: low nibbles for j < 16, high otherwise).
#if defined(WTYPE_Q4_1)
  const uint w = (row + (k >> 5) * 20u) >> 2, cw = w + 1u + ((k & 15u) >> 2);
#else
  const uint w = (row + (k >> 5) * 24u) >> 2, cw = w + 2u + ((k & 15u) >> 2);
#endif
  r.a = uvec4(weight_words[w], weight_words[w + 1u], weight_words[cw], weight_words[cw + 1u]);
#elif defined(WTYPE_Q5_0)
  // Q5_0 blocks of 22 bytes are 2-byte aligned: the 2 words covering d and qh, and the 3 covering the 8 code bytes.
  const uint blk = row + (k >> 5) * 22u, cb = blk + 6u + (k & 15u);
  const uint last = (WEIGHT_ROWS * pc.row_bytes - 1u) >> 2;  // the chunk's last word: the fifth may pass the end
  r.a = uvec4(weight_words[blk >> 2], weight_words[(blk >> 2) + 1u], weight_words[cb >> 2],
              weight_words[(cb >> 2) + 1u]);
  r.b.x = weight_words[min((cb >> 2) + 2u, last)];
#elif defined(WTYPE_Q2_K)
  // Q2_K super-blocks of 84 bytes (word-aligned): the word holding the 8 elements' scale byte (scales[j / 16]), the
  // 2 words of their codes (qs[32 (j / 128) + j % 32 ..], 2 bits at 2 ((j % 128) / 32)), and the word of d and dmin.
  const uint blk = (row >> 2) + (k >> 8) * 21u, j = k & 255u;
  const uint cw = blk + 4u + 8u * (j >> 7) + ((j & 31u) >> 2);
  r.a = uvec4(weight_words[blk + (j >> 6)], weight_words[cw], weight_words[cw + 1u], weight_words[blk + 20u]);
#elif defined(WTYPE_IQ4_XS)
  // IQ4_XS super-blocks of 136 bytes (word-aligned): the word of d and scales_h, the word of scales_l, and the 2
  // words of the 8 elements' codes, qs[16 s + (l & 15) ..] of sub-block s (low nibbles for l < 16, high otherwise).
  const uint blk = (row >> 2) + (k >> 8) * 34u, j = k & 255u;
  const uint cw = blk + 2u + 4u * (j >> 5) + ((j & 15u) >> 2);
  r.a = uvec4(weight_words[blk], weight_words[blk + 1u], weight_words[cw], weight_words[cw + 1u]);
#else
  // Other types: decoded here with dequant.glsl (their loads and math are not yet separated).
  r.a = pack8(dequant4(row, k), !K_TAIL || k + 4u < pc.cols ? dequant4(row, k + 4u) : vec4(0.0));
#endif
  return r;
}

// `inside`: the weight row exists.
uvec4 decode_w(Raw r, bool inside, uint row, uint k) {
  if (!inside || (K_TAIL && k >= pc.cols)) return uvec4(0u);
#if defined(WTYPE_F16)
  return r.a;
#elif defined(WTYPE_Q4_0)
  // K % 32 == 0 for Q4_0: the 8 elements are inside the row.
  const uint blk = row + (k >> 5) * 18u, cb = blk + 2u + (k & 15u);
  const f16vec2 d = unpackFloat2x16(r.a.x >> ((blk & 2u) * 8u)).xx;
  const uint s = (cb & 2u) * 8u;  // the code bytes start 0 or 2 bytes into r.a.y
  const uint nib = (k & 16u) >> 2;  // 0: low nibbles, 4: high nibbles
  const uint lo = funnel16(r.a.y, r.a.z, s) >> nib, hi = funnel16(r.a.z, r.a.w, s) >> nib;
  return uvec4(q4_0_pair(lo, d), q4_0_pair(lo >> 16, d), q4_0_pair(hi, d), q4_0_pair(hi >> 16, d));
#elif defined(WTYPE_Q8_0)
  const uint blk = row + (k >> 5) * 34u, cb = blk + 2u + (k & 31u);
  const f16vec2 d = unpackFloat2x16(r.a.x >> ((blk & 2u) * 8u)).xx;
  const uint s = (cb & 2u) * 8u;
  const uint lo = funnel16(r.a.y, r.a.z, s), hi = funnel16(r.a.z, r.a.w, s);
  return uvec4(q8_0_pair(lo, d), q8_0_pair(lo >> 16, d), q8_0_pair(hi, d), q8_0_pair(hi >> 16, d));
#elif defined(WTYPE_Q6_K)
  // w = (d * scales[s]) * (6-bit code - 32) as dequant.glsl, in f16 arithmetic two elements per instruction
  // (q6_k_pair): d * scales[s] is an exact product rounded once to f16, and w rounds once more, where dequant.glsl's
  // f32 expression rounds to f16 only at the end (NMSE 9e-8 where it was 7e-8; H200, us: 16x14336x4096 75.9 -> 69.3,
  // 16x128256x4096 530 -> 469, 512x14336x4096 529 -> 488).
  const uint blk = row + (k >> 8) * 210u, j = k & 255u, h = j >> 7, rr = (j & 127u) >> 5, l = j & 31u;
  const uint ql_shift = ((blk + 64u * h + 32u * (rr & 1u) + l) & 2u) * 8u, qh_shift = ((blk + 128u + 32u * h + l) & 2u) * 8u;
  const uint nib = 4u * (rr >> 1), bits = 2u * rr;
  const uint lo0 = funnel16(r.a.x, r.a.y, ql_shift) >> nib, lo1 = funnel16(r.a.y, r.a.z, ql_shift) >> nib;
  const uint hi0 = funnel16(r.a.w, r.b.x, qh_shift) >> bits, hi1 = funnel16(r.b.x, r.b.y, qh_shift) >> bits;
  const uint sb = blk + 192u + (j >> 4), db = blk + 208u;
  const f16vec2 ds = f16vec2(unpackFloat2x16(r.b.w >> ((db & 2u) * 8u)).x * float16_t(q6_k_scale(r.b.z, sb)));
  return q6_k_eight(lo0, lo1, hi0, hi1, ds);
#elif defined(WTYPE_MXFP4)
  // Same expression as dequant.glsl: w = table[q] * 2^(e - 128), rounded to f16 by pack8.
  const uint blk = row + (k >> 5) * 17u, cb = blk + 1u + (k & 15u);
  const float d = dq_e8m0_half((r.a.x >> ((blk & 3u) * 8u)) & 0xFFu);
  const uint s = (cb & 3u) * 8u;  // the code bytes start 0..3 bytes into r.a.y
  const uint lo = s == 0u ? r.a.y : (r.a.y >> s) | (r.a.z << (32u - s));
  const uint hi = s == 0u ? r.a.z : (r.a.z >> s) | (r.a.w << (32u - s));
  const uint nib = (k & 16u) >> 2;  // 0: low nibbles, 4: high nibbles
  return lut8(lo >> nib, hi >> nib, d);
#elif defined(WTYPE_IQ4_NL)
  // Same expression as dequant.glsl: w = d * table[q], rounded to f16 by pack8; the words as Q4_0's.
  const uint blk = row + (k >> 5) * 18u, cb = blk + 2u + (k & 15u);
  const float d = unpackHalf2x16(r.a.x >> ((blk & 2u) * 8u)).x;
  const uint s = (cb & 2u) * 8u, nib = (k & 16u) >> 2;
  const uint lo = funnel16(r.a.y, r.a.z, s) >> nib, hi = funnel16(r.a.z, r.a.w, s) >> nib;
  return lut8(lo, hi, d);
#elif defined(WTYPE_Q4_1)
  // Same expression as dequant.glsl: w = q * d + m, rounded to f16 by pack8.
  const vec2 dm = unpackHalf2x16(r.a.x);
  const uint nib = (k & 16u) >> 2;
  precise const vec4 a = vec4(dq_bytes(r.a.z >> nib) & 0x0Fu) * dm.x + dm.y;
  precise const vec4 b = vec4(dq_bytes(r.a.w >> nib) & 0x0Fu) * dm.x + dm.y;
  return pack8(a, b);
#elif defined(WTYPE_Q5_1)
  // Same expression as dequant.glsl: w = q * d + m; the fifth bit of element j is bit j of qh.
  const uint j = k & 31u, nib = (j & 16u) >> 2, bits = r.a.y >> j;
  const vec2 dm = unpackHalf2x16(r.a.x);
  precise const vec4 a = vec4(dq_five_bit_codes(r.a.z >> nib, bits)) * dm.x + dm.y;
  precise const vec4 b = vec4(dq_five_bit_codes(r.a.w >> nib, bits >> 4)) * dm.x + dm.y;
  return pack8(a, b);
#elif defined(WTYPE_Q5_0)
  // Same expression as dequant.glsl: w = (q - 16) * d; d and qh sit at byte 0 or 2 of the first word.
  const uint blk = row + (k >> 5) * 22u, j = k & 31u, cb = blk + 6u + (j & 15u), h = (blk & 2u) * 8u;
  const float d = unpackHalf2x16(r.a.x >> h).x;
  const uint qh = h == 0u ? (r.a.x >> 16) | (r.a.y << 16) : r.a.y, bits = qh >> j;
  const uint s = (cb & 2u) * 8u, nib = (j & 16u) >> 2;
  const uint lo = funnel16(r.a.z, r.a.w, s) >> nib, hi = funnel16(r.a.w, r.b.x, s) >> nib;
  precise const vec4 a = vec4(ivec4(dq_five_bit_codes(lo, bits)) - 16) * d;
  precise const vec4 b = vec4(ivec4(dq_five_bit_codes(hi, bits >> 4)) - 16) * d;
  return pack8(a, b);
#elif defined(WTYPE_Q2_K)
  // Same expression as dequant.glsl: w = (d * sc) * q - dmin * mn, rounded to f16 by pack8.
  const uint j = k & 255u, sm = (r.a.x >> (8u * ((j >> 4) & 3u))) & 0xFFu, shift = 2u * ((j & 127u) >> 5);
  const vec2 dm = unpackHalf2x16(r.a.w);
  precise const float dl = dm.x * float(sm & 0x0Fu), ml = dm.y * float(sm >> 4);
  precise const vec4 a = dl * vec4(dq_bytes(r.a.y >> shift) & 3u) - ml;
  precise const vec4 b = dl * vec4(dq_bytes(r.a.z >> shift) & 3u) - ml;
  return pack8(a, b);
#elif defined(WTYPE_IQ4_XS)
  // Same expression as dequant.glsl: w = (d * (ls - 32)) * table[q], rounded to f16 by pack8.
  const uint j = k & 255u, s = j >> 5;
  precise const float dl = unpackHalf2x16(r.a.x).x * float(int(dq_iq4_xs_scale(r.a.x, r.a.y, s)) - 32);
  const uint nib = (j & 16u) >> 2;  // 0: low nibbles, 4: high nibbles
  return lut8(r.a.z >> nib, r.a.w >> nib, dl);
#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
  // The 8 elements share one 32-element sub-block s: its 6-bit scale and min, decoded once. w = (d * sc) * q - dmin *
  // mn as dequant.glsl, in f16 arithmetic two elements per instruction (q4_k_pair): d * sc and dmin * mn are exact
  // products rounded once to f16, and w rounds once more, where dequant.glsl's f32 expression rounds to f16 only at
  // the end: NMSE against the CPU 3e-7 where it was 7e-8 (the GEMM's f16-operand tolerance is 2e-6). The f32
  // expression's int-to-float and f32-to-f16 conversions were most of the decode's instructions (H200, us:
  // 16x14336x4096 61.9 -> 56.8, 512x14336x4096 424 -> 391; docs/benchmarks.md).
  const uint j = k & 255u, s = j >> 5;
  const uvec2 scale_min = dq_k4_scale_min(r.a.yzw, s);  // (sc, mn) from the header's scales[12]; dm: (d sc, dmin mn)
  const f16vec2 dm = unpackFloat2x16(r.a.x) * f16vec2(float16_t(scale_min.x), float16_t(scale_min.y));
  const f16vec2 d1 = dm.xx, m1 = dm.yy;
  const uint shift = (j & 32u) >> 3, lo = r.b.x >> shift, hi = r.b.y >> shift;
#if defined(WTYPE_Q4_K)
  return uvec4(q4_k_pair(lo, d1, m1), q4_k_pair(lo >> 16, d1, m1), q4_k_pair(hi, d1, m1), q4_k_pair(hi >> 16, d1, m1));
#else
  // Fifth bits: bit s of qh[l + i], the 8 bytes in r.b.zw.
  const uint hlo = r.b.z >> s, hhi = r.b.w >> s;
  return uvec4(q5_k_pair(lo, hlo, d1, m1), q5_k_pair(lo >> 16, hlo >> 16, d1, m1), q5_k_pair(hi, hhi, d1, m1),
               q5_k_pair(hi >> 16, hhi >> 16, d1, m1));
#endif
#else
  return r.a;
#endif
}

#if defined(WTYPE_Q6_K)
// A W_PAIRED unit of Q6_K: the 8 elements at k (rr even) into w0 and the 8 at k + 32 (rr + 1) into w1, as decode_w's
// expression. The words: a = ql[0..3), qh, b = qh[1..3), the two scale words, c = the partner's ql[0..3), d.
void decode_w_pair(Raw r, bool inside, uint row, uint k, out uvec4 w0, out uvec4 w1) {
  if (!inside || (K_TAIL && k >= pc.cols)) {  // K % 256 == 0: k + 32 is inside the row when k is
    w0 = uvec4(0u);
    w1 = uvec4(0u);
    return;
  }
  const uint blk = row + (k >> 8) * 210u, j = k & 255u, h = j >> 7, rr = (j & 127u) >> 5, l = j & 31u;
  const uint ql_shift = ((blk + 64u * h + l) & 2u) * 8u, qh_shift = ((blk + 128u + 32u * h + l) & 2u) * 8u;
  const uint nib = 4u * (rr >> 1), bits = 2u * rr;
  const uint lo0 = funnel16(r.a.x, r.a.y, ql_shift) >> nib, lo1 = funnel16(r.a.y, r.a.z, ql_shift) >> nib;
  const uint po0 = funnel16(r.c.x, r.c.y, ql_shift) >> nib, po1 = funnel16(r.c.y, r.c.z, ql_shift) >> nib;
  const uint qh0 = funnel16(r.a.w, r.b.x, qh_shift), qh1 = funnel16(r.b.x, r.b.y, qh_shift);
  const uint hi0 = qh0 >> bits, hi1 = qh1 >> bits, ph0 = qh0 >> (bits + 2u), ph1 = qh1 >> (bits + 2u);
  const uint sb = blk + 192u + (j >> 4), db = blk + 208u;
  const float16_t d = unpackFloat2x16(r.c.w >> ((db & 2u) * 8u)).x;
  const f16vec2 ds0 = f16vec2(d * float16_t(q6_k_scale(r.b.z, sb)));
  const f16vec2 ds1 = f16vec2(d * float16_t(q6_k_scale(r.b.w, sb + 2u)));
  w0 = q6_k_eight(lo0, lo1, hi0, hi1, ds0);
  w1 = q6_k_eight(po0, po1, ph0, ph1, ds1);
}
#endif

// `row`: the element offset of the (clamped) activation row.
Raw load_x_raw(uint row, uint k) {
  if (K_TAIL) k = k < pc.cols ? k : 0u;
  const bool whole = !K_TAIL || k + 4u < pc.cols;
  Raw r;
#if defined(X_F16)
  // Element e = row + k is a multiple of 4: it starts a uvec4 whenever K % 8 == 0; else its upper half and the
  // lower half of the next may be needed.
  const uint e = row + k, at = e / 8u;
  r.a = xh[at];
  r.b = X_SPLIT && (e & 4u) != 0u && whole ? xh[at + 1u] : uvec4(0u);
#else
  const uint at = (row + k) / 4u;
  r.a = floatBitsToUint(x4[at]);
  r.b = whole ? floatBitsToUint(x4[at + 1u]) : uvec4(0u);
#endif
  return r;
}

uvec4 decode_x(Raw r, bool inside, uint row, uint k) {
  if (!inside || (K_TAIL && k >= pc.cols)) return uvec4(0u);
  const bool whole = !K_TAIL || k + 4u < pc.cols;
#if defined(X_F16)
  if (!X_SPLIT || ((row + k) & 4u) == 0u) return whole ? r.a : uvec4(r.a.xy, 0u, 0u);
  return uvec4(r.a.zw, whole ? r.b.xy : uvec2(0u));
#else
  return pack8(uintBitsToFloat(r.a), whole ? uintBitsToFloat(r.b) : vec4(0.0));
#endif
}

// The first uvec4 column of W unit u of a row: u, or for pairs the column c of the pair (c, c + 4), c % 8 < 4.
uint w_unit_column(uint u) { return W_PAIRED ? u + (u & ~3u) : u; }

// Decodes a W unit's raw words into the stage at `at` (a pair: at and at + 4).
void w_store(Raw r, bool inside, uint row, uint k, uint at) {
#if defined(WTYPE_Q6_K)
  if (W_PAIRED) {
    uvec4 w0, w1;
    decode_w_pair(r, inside, row, k, w0, w1);
    smem[at] = w0;
    smem[at + 4u] = w1;
    return;
  }
#endif
  smem[at] = decode_w(r, inside, row, k);
}

// Staging item i of this invocation: X's row (item / G) of the tile, columns 8 * (item % G) .. + 7; W's unit
// (item % WU) of row (item / WU), from column 8 * w_unit_column(item % WU). Their row offsets and whether the rows
// exist are fixed for the whole loop (ITEM_SETUP). Register set S (0 or 1) holds the raw words of one
// K step; with DEPTH 2 the two sets alternate.
#define W_OK(i) (i < W_ITEMS && tid + i * WG < BN * WU)
#define X_OK(i) (i < X_ITEMS && tid + i * WG < BM * G)
#if defined(MOE)
// The tile's row m: its slot's input row.
uint moe_x_row(uint tile_first, uint m) {
  const uint slot = sorted[tile_first + m];
  return pc.per_slot != 0u ? slot : slot / pc.k;
}
#define ITEM_SETUP(i)                                                                                              \
  const uint wn##i = n0 + (tid + i * WG) / WU, xm##i = (tid + i * WG) / G, kc##i = 8 * ((tid + i * WG) % G);         \
  const uint wc##i = w_unit_column((tid + i * WG) % WU);                                                           \
  const bool win##i = wn##i < pc.rows, xin##i = xm##i < tile_rows;                                                 \
  const uint wrow##i = (expert_row0 + min(wn##i, pc.rows - 1u)) * pc.row_bytes,                                   \
             xrow##i = moe_x_row(tile_first, min(xm##i, tile_rows - 1u)) * pc.cols;
#else
#define ITEM_SETUP(i)                                                                                         \
  const uint wn##i = n0 + (tid + i * WG) / WU, xm##i = m0 + (tid + i * WG) / G, kc##i = 8 * ((tid + i * WG) % G); \
  const uint wc##i = w_unit_column((tid + i * WG) % WU);                                                      \
  const bool win##i = wn##i < pc.rows, xin##i = xm##i < pc.n_tokens;                                          \
  const uint wrow##i = min(wn##i, pc.rows - 1u) * pc.row_bytes, xrow##i = min(xm##i, pc.n_tokens - 1u) * pc.cols;
#endif
#define W_LOAD(S, i, kk) if (W_OK(i)) wr##S##i = load_w_raw(wrow##i, (kk) + 8 * wc##i);
#define X_LOAD(S, i, kk) if (X_OK(i)) xr##S##i = load_x_raw(xrow##i, (kk) + kc##i);
#define W_STORE(S, i, kk, st) \
  if (W_OK(i)) w_store(wr##S##i, win##i, wrow##i, (kk) + 8 * wc##i, (st) + XS + ((tid + i * WG) / WU) * LDS + wc##i);
#define X_STORE(S, i, kk, st) \
  if (X_OK(i)) smem[(st) + ((tid + i * WG) / G) * LDS + (tid + i * WG) % G] = decode_x(xr##S##i, xin##i, xrow##i, (kk) + kc##i);
#define LOAD_SET(S, kk) \
  W_LOAD(S, 0, kk) W_LOAD(S, 1, kk) W_LOAD(S, 2, kk) W_LOAD(S, 3, kk) \
  X_LOAD(S, 0, kk) X_LOAD(S, 1, kk) X_LOAD(S, 2, kk) X_LOAD(S, 3, kk)
#define STORE_SET(S, kk, st) \
  W_STORE(S, 0, kk, st) W_STORE(S, 1, kk, st) W_STORE(S, 2, kk, st) W_STORE(S, 3, kk, st) \
  X_STORE(S, 0, kk, st) X_STORE(S, 1, kk, st) X_STORE(S, 2, kk, st) X_STORE(S, 3, kk, st)

#define A_LOAD(i) if (i < FM) coopMatLoad(a##i, smem, st + (sm * SM + i * 16) * LDS + ks, LDS, gl_CooperativeMatrixLayoutRowMajor);
#define B_LOAD(j) if (j < FN) coopMatLoad(b##j, smem, st + XS + (sn * SN + j * 16) * LDS + ks, LDS, gl_CooperativeMatrixLayoutColumnMajor);
#define MMA(i, j) if (i < FM && j < FN) c##i##j = coopMatMulAdd(a##i, b##j, c##i##j);
#define MMA_ROW(i) MMA(i, 0) MMA(i, 1) MMA(i, 2) MMA(i, 3)
// The multiply-adds of one K step on the stage at stage_base.
#define COMPUTE(stage_base)                                                        \
  {                                                                                \
    const uint st = (stage_base);                                                  \
    [[unroll]] for (uint kk = 0; kk < G / (2 * KG); ++kk) {                        \
      const uint ks = 2 * (kk * KG + kg); /* this group's slice: 16 halves = 2 uvec4 */ \
      FRAG_A a0, a1, a2, a3;                                                       \
      FRAG_B b0, b1, b2, b3;                                                       \
      A_LOAD(0) A_LOAD(1) A_LOAD(2) A_LOAD(3)                                      \
      B_LOAD(0) B_LOAD(1) B_LOAD(2) B_LOAD(3)                                      \
      MMA_ROW(0) MMA_ROW(1) MMA_ROW(2) MMA_ROW(3)                                  \
    }                                                                              \
  }

// One K step at k (DEPTH 2 and 3): the loads of the step AHEAD steps on go into register set L, the multiply-adds
// run on the stage at `st`, set S (the next step's raw words) is decoded into the stage at `next`, one barrier, and k
// advances.
#define K_STEP(L, AHEAD, st, S, next)                              \
  if (k + AHEAD * BK < K) { LOAD_SET(L, k + AHEAD * BK) }          \
  COMPUTE(st)                                                      \
  if (STAGES == 1u) barrier(); /* every subgroup done reading */   \
  if (k + BK < K) { STORE_SET(S, k + BK, next) }                   \
  barrier();                                                       \
  k += BK;

// Output block (i, j) of this subgroup: straight to y when whole, else through its f32 tile in smem (64 uvec4 at
// sg * 64, row stride 4 uvec4 = 16 floats) with bounds checks.
#define STORE_C(i, j)                                                                                         \
  if (i < FM && j < FN) {                                                                                     \
    const uint bm = m0 + sm * SM + i * 16, bn = n0 + sn * SN + j * 16;                                        \
    if (z > 0u) {                                                                                             \
      if (bm + 16 <= pc.n_tokens && bn + 16 <= pc.rows) {                                                     \
        coopMatStore(c##i##j, part, part0 + bm * pc.rows + bn, pc.rows, gl_CooperativeMatrixLayoutRowMajor);   \
      } else {                                                                                                \
        coopMatStore(c##i##j, smem, sg * 64, 4, gl_CooperativeMatrixLayoutRowMajor);                          \
        subgroupMemoryBarrierShared();                                                                        \
        subgroupBarrier();                                                                                    \
        for (uint e = gl_SubgroupInvocationID; e < 256; e += gl_SubgroupSize) {                               \
          const uint m = bm + e / 16, n = bn + e % 16;                                                        \
          if (m < pc.n_tokens && n < pc.rows) part[part0 + m * pc.rows + n] = uintBitsToFloat(smem[sg * 64 + e / 4][e % 4]); \
        }                                                                                                     \
        subgroupBarrier();                                                                                    \
      }                                                                                                       \
    } else if (bm + 16 <= pc.n_tokens && bn + 16 <= pc.rows) {                                                \
      const uint at = bm * pc.out_stride + pc.out_row0 + bn;                                                  \
      if (ACCUMULATE) {                                                                                       \
        FRAG_C prior;                                                                                         \
        coopMatLoad(prior, y, at, pc.out_stride, gl_CooperativeMatrixLayoutRowMajor);                         \
        c##i##j += prior;                                                                                     \
      }                                                                                                       \
      coopMatStore(c##i##j, y, at, pc.out_stride, gl_CooperativeMatrixLayoutRowMajor);                        \
    } else {                                                                                                  \
      coopMatStore(c##i##j, smem, sg * 64, 4, gl_CooperativeMatrixLayoutRowMajor);                            \
      subgroupMemoryBarrierShared();                                                                          \
      subgroupBarrier();                                                                                      \
      for (uint e = gl_SubgroupInvocationID; e < 256; e += gl_SubgroupSize) {                                 \
        const uint m = bm + e / 16, n = bn + e % 16;                                                          \
        if (m < pc.n_tokens && n < pc.rows) {                                                                 \
          const uint at = m * pc.out_stride + pc.out_row0 + n;                                                \
          const float v = uintBitsToFloat(smem[sg * 64 + e / 4][e % 4]);                                    \
          y[at] = ACCUMULATE ? y[at] + v : v;                                                                 \
        }                                                                                                     \
      }                                                                                                       \
      subgroupBarrier();                                                                                      \
    }                                                                                                         \
  }
#if defined(MOE)
// Every block through the subgroup's f32 tile: C's rows are slots, scattered over y.
#undef STORE_C
#define STORE_C(i, j)                                                                                         \
  if (i < FM && j < FN) {                                                                                     \
    const uint bm = sm * SM + i * 16, bn = n0 + sn * SN + j * 16;                                             \
    coopMatStore(c##i##j, smem, sg * 64, 4, gl_CooperativeMatrixLayoutRowMajor);                              \
    subgroupMemoryBarrierShared();                                                                            \
    subgroupBarrier();                                                                                        \
    for (uint e = gl_SubgroupInvocationID; e < 256; e += gl_SubgroupSize) {                                   \
      const uint m = bm + e / 16, n = bn + e % 16;                                                            \
      if (m < tile_rows && n < pc.rows) {                                                                     \
        float v = uintBitsToFloat(smem[sg * 64 + e / 4][e % 4]);                                              \
        if (pc.has_bias != 0u) v += bias[expert_row0 + n];                                                    \
        y[sorted[tile_first + m] * pc.out_stride + n] = v;                                                    \
      }                                                                                                       \
    }                                                                                                         \
    subgroupBarrier();                                                                                        \
  }
#endif
#define STORE_ROW(i) STORE_C(i, 0) STORE_C(i, 1) STORE_C(i, 2) STORE_C(i, 3)

// KG > 1: fragment row i of groups 1..KG-1 goes to shared memory (group g's subgroup s' at ((g-1) WM WN + s') FN 64
// uvec4, fragment j 64 further, 16 floats per row), then group 0 adds it to its own. After the loop's last barrier.
#define RED_STORE(i, j) if (j < FN) coopMatStore(c##i##j, smem, red0 + j * 64, 4, gl_CooperativeMatrixLayoutRowMajor);
#define RED_ADD(i, j)                                                                           \
  if (j < FN) {                                                                                 \
    FRAG_C t;                                                                                   \
    coopMatLoad(t, smem, ((g - 1) * WM * WN + sw) * FN * 64 + j * 64, 4, gl_CooperativeMatrixLayoutRowMajor); \
    c##i##j += t;                                                                               \
  }
#define REDUCE_ROW(i)                                                      \
  if (i < FM) {                                                            \
    if (kg > 0) {                                                          \
      const uint red0 = ((kg - 1) * WM * WN + sw) * FN * 64;               \
      RED_STORE(i, 0) RED_STORE(i, 1) RED_STORE(i, 2) RED_STORE(i, 3)      \
    }                                                                      \
    barrier();                                                             \
    if (kg == 0) {                                                         \
      for (uint g = 1; g < KG; ++g) { RED_ADD(i, 0) RED_ADD(i, 1) RED_ADD(i, 2) RED_ADD(i, 3) } \
    }                                                                      \
    barrier();                                                             \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, kg = sg / (WM * WN), sw = sg % (WM * WN), sm = sw / WN, sn = sw % WN;
#if defined(MOE)
  const uint tile = gl_WorkGroupID.y;
  if (tile >= tiles[0]) return;  // the grid covers the most tiles a step can have
  const uint expert_row0 = tiles[1u + 3u * tile] * pc.rows, tile_first = tiles[2u + 3u * tile];
  const uint tile_rows = tiles[3u + 3u * tile];
  const uint n0 = gl_WorkGroupID.x * BN, m0 = 0;
#else
  const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
#endif
  FRAG_C c00 = FRAG_C(0.0), c01 = FRAG_C(0.0), c02 = FRAG_C(0.0), c03 = FRAG_C(0.0);
  FRAG_C c10 = FRAG_C(0.0), c11 = FRAG_C(0.0), c12 = FRAG_C(0.0), c13 = FRAG_C(0.0);
  FRAG_C c20 = FRAG_C(0.0), c21 = FRAG_C(0.0), c22 = FRAG_C(0.0), c23 = FRAG_C(0.0);
  FRAG_C c30 = FRAG_C(0.0), c31 = FRAG_C(0.0), c32 = FRAG_C(0.0), c33 = FRAG_C(0.0);
  Raw wr00, wr01, wr02, wr03, xr00, xr01, xr02, xr03;  // register set 0
  Raw wr10, wr11, wr12, wr13, xr10, xr11, xr12, xr13;  // register set 1 (DEPTH 2, 3)
  Raw wr20, wr21, wr22, wr23, xr20, xr21, xr22, xr23;  // register set 2 (DEPTH 3)
  ITEM_SETUP(0) ITEM_SETUP(1) ITEM_SETUP(2) ITEM_SETUP(3)

  // This workgroup's K steps: [k_begin, K).
  const uint z = gl_WorkGroupID.z;
  const uint KC = ((pc.cols + SPLIT_K - 1) / SPLIT_K + BK - 1) / BK * BK;
  const uint k_begin = z * KC, K = min(pc.cols, k_begin + KC);
  const uint part0 = z > 0u ? (z - 1u) * partial_stride() : 0u;
  LOAD_SET(0, k_begin)
  STORE_SET(0, k_begin, 0)
  if (DEPTH == 1) {
    barrier();
    // Step at k: stage s holds it; the loads of k + BK are in flight during its multiply-adds, then go to stage s ^ 1
    // (last read before the previous step's barrier).
    for (uint k = k_begin, s = 0; k < K; k += BK, s ^= 1u) {
      const bool more = k + BK < K;
      if (more) { LOAD_SET(0, k + BK) }
      COMPUTE(s * STAGE1)
      if (STAGES == 1u) barrier();
      if (more) { STORE_SET(0, k + BK, (s ^ 1u) * STAGE1) }
      barrier();
    }
  } else if (DEPTH == 2) {
    if (k_begin + BK < K) { LOAD_SET(1, k_begin + BK) }
    barrier();
    // Two steps per iteration, so each register set has a fixed name. Step at k (stage s, set s): the loads of
    // k + 2 BK go into set s (stored in the previous step), set s ^ 1 (loaded a step earlier) goes to stage s ^ 1.
    for (uint k = k_begin; k < K;) {
      K_STEP(0, 2, 0, 1, STAGE1)
      if (k >= K) break;
      K_STEP(1, 2, STAGE1, 0, 0)
    }
  } else {
    // DEPTH 3: step j (counted from k_begin) uses register set j % 3 and stage j % 2; three steps per iteration,
    // the stage carried in s. At step k the loads of k + 3 BK go into its own set (stored in the previous step).
    if (k_begin + BK < K) { LOAD_SET(1, k_begin + BK) }
    if (k_begin + 2 * BK < K) { LOAD_SET(2, k_begin + 2 * BK) }
    barrier();
    uint s = 0;
    for (uint k = k_begin; k < K;) {
      K_STEP(0, 3, s * STAGE1, 1, (s ^ 1u) * STAGE1)
      s ^= 1u;
      if (k >= K) break;
      K_STEP(1, 3, s * STAGE1, 2, (s ^ 1u) * STAGE1)
      s ^= 1u;
      if (k >= K) break;
      K_STEP(2, 3, s * STAGE1, 0, (s ^ 1u) * STAGE1)
      s ^= 1u;
    }
  }
  if (KG > 1) {
    REDUCE_ROW(0) REDUCE_ROW(1) REDUCE_ROW(2) REDUCE_ROW(3)
  }
  if (kg == 0) {
    STORE_ROW(0) STORE_ROW(1) STORE_ROW(2) STORE_ROW(3)
  }
}
