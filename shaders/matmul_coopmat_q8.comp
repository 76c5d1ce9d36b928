#version 450
// Matrix product on int8 cooperative matrices (VK_KHR_cooperative_matrix, 16x16x32 s8 x s8 -> s32) for the steps of
// a batched decode (5-64 tokens), whose f16 GEMM (matmul_coopmat.comp) is bound by staging each weight as f16:
//   y[t, out_row0 + r] = dot(weight row r, x[t, :])   C[M=tokens, N=rows] = X[M, K] * W[N, K]^T, K % BK == 0.
// X comes as int8 rows with one f32 scale per 32 elements (quantize_q8.comp; q8_rows.glsl's layout, K % 128 == 0 so
// every row starts on 16 bytes). W's codes are staged as they are (4-bit codes widened to bytes, two per nibble pair
// of a word: 8 instructions per 32 weights), and the scales act on the integer products of each 32-element block:
//   C[t, n] = sum over blocks b of  xs[t, b] * ws[n, b] * (integer dot of their codes)  -  min terms,
// where ws is the block's weight scale (Q4_0: d; Q4_K: d * sc) and Q4_K's min term, sum over b of dmin * mn[n, b] *
// (xs[t, b] * sum of t's codes in b), is one f16 multiply-add of 16x16x16 per K step (A: the blocks' code sums, B:
// the negated mins; a K step's blocks, padded with zeros to 16). Q4_0's codes are widened with their offset
// (q - 8, exact), Q6_K's likewise (q - 32). Q6_K's scales are per 16 elements (d * sc[sub-block]) and the device's
// int8 products are 32 deep, so each of its blocks takes two products of W's codes, one with X's codes 16-31 zeroed
// and one with 0-15 zeroed, each scaled by its half's ws.
// A block's scaling: its integer 16 x 16 product, converted to f32, times WS (ws[n, b] for every row: a load of stride
// 0) times XS (xs[t, b] for every column: a column-major load of stride 0), added to the f32 accumulator.
//
// Tiling: WN subgroups (spec constant 3) side by side along N, each owning BM x (FN 16) of C (spec constants 1 and 2:
// BM = 16 FM tokens, FM and FN <= 4); K steps of BK (spec constant 6: 128 or 256, within one Q4_K super-block). Per
// K step, staged in shared memory: W's codes [BN][BK] and X's codes [BM][BK] as bytes in rows of BK / 16 + 1 uvec4
// (an odd count: 8 consecutive rows' 16-byte fragment rows fall in distinct banks), ws [BK / 32][BN] and
// xs [BK / 32][BM] as f32, and for Q4_K the f16 negated mins [16][BN] and code sums [BM][16] (blocks past BK / 32
// zero). The raw words of step k + 1 are loaded into registers before step k's multiply-adds and stored after them:
// into the other of two stages (STAGES 2, one barrier per step), or with STAGES 1 into the same one after a barrier
// (two per step, half the shared memory: more resident workgroups where the driver's shared-memory share per
// multiprocessor, not registers, bounds them; op_matmul.cpp's q8_gemm_stages). Per invocation and K step: at most 8
// W items (16 code bytes of Q4_K, one 18-byte Q4_0 block, 48 bytes of Q6_K: 64 codes), 4 X items (a 32-code block)
// and one Q4_K / Q6_K header (BN <= invocations; the host checks). Q6_K stages X's blocks as [codes 0-15 | 16 zeros
// | codes 16-31] (3 uvec4; rows of 3 BK / 32 + 1): a fragment loaded at the first is the block with its upper half
// zero, one at the zeros the block with its lower half zero.
// Split-K as matmul_coopmat.comp: workgroup z > 0 writes its partial C at (z - 1) * partial_stride() in binding 3.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_integer_dot_product : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer WeightWords { uint weight_words[]; };
layout(binding = 0) readonly buffer WeightVec { uvec4 weight_vec[]; };
layout(binding = 1) readonly buffer XWords { uint xq[]; };
layout(binding = 1) readonly buffer XVec { uvec4 xq4[]; };
layout(binding = 2) buffer Y { float y[]; };
layout(binding = 3) buffer Partial { float part[]; };
layout(push_constant) uniform Push {
  uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride; uint n_tokens;
} pc;
#include "dequant.glsl"  // dq_k4_scale_min
#include "q8_rows.glsl"   // Q8_FLOAT_BIAS, q8_biased_scaled

layout(constant_id = 1) const uint FM = 1;  // fragments of 16 tokens: BM = 16 FM
layout(constant_id = 2) const uint FN = 2;  // fragments of 16 rows per subgroup
layout(constant_id = 3) const uint WN = 4;  // subgroups
layout(constant_id = 5) const bool ACCUMULATE = false;  // y += W x
layout(constant_id = 6) const uint BK = 128;  // 128 or 256
layout(constant_id = 10) const uint SPLIT_K = 1;
layout(constant_id = 12) const uint STAGES = 2;  // shared-memory stages of a K step, 1 or 2 (the K loop)
const uint BLOCKS = BK / 32;
const uint BM = 16 * FM, SN = 16 * FN, BN = WN * SN;
const uint LDS = BK / 16 + 1;  // row stride of the staged W codes, in uvec4
#if defined(WTYPE_Q6_K)
const uint LDX = 3 * BLOCKS + 1;    // X's rows: [lower half | zeros | upper half] per block
const uint WSUBS = 2 * BLOCKS;      // weight scales per row and K step (per 16 elements)
const uint W_PER_ROW = BLOCKS / 2;  // W items per row and K step: 64 codes each
const uint X_LO = 3, X_HI = 2;      // a block's lower / upper half at uvec4 X_LO b / X_LO b + X_HI of an X row
#else
const uint LDX = LDS;
const uint WSUBS = BLOCKS;
const uint W_PER_ROW = BLOCKS;  // Q4_K's 16 code bytes (32 codes), Q4_0's whole 18-byte blocks
const uint X_LO = 2, X_HI = 1;
#endif
const uint WG = gl_WorkGroupSize.x;
const uint XS_BASE = BN * LDS;  // a stage's codes: W rows [0, XS_BASE), then X rows
const uint STAGE = BN * LDS + BM * LDX;
const uint W_ITEMS = (BN * W_PER_ROW + WG - 1) / WG;  // W items per invocation and K step
const uint X_ITEMS = (BM * BLOCKS + WG - 1) / WG;  // 32-code blocks of X per invocation and K step
shared uvec4 codes[STAGES * STAGE];
// f32 scratch: the stages' scales, ws [WSUBS][BN] from WS_BASE and xs [BK / 32][BM] from XSC_BASE; after the K
// loop (every subgroup past its last barrier) the edge tiles, one 16 x 16 block per subgroup from 0. Sharing the
// space lets a 64 x 64 Q4_K tile fit 48 KiB.
const uint WS_BASE = 0, XSC_BASE = STAGES * WSUBS * BN, SCALES = XSC_BASE + STAGES * BLOCKS * BM, EDGES = WN * 256;
shared float scratch[SCALES > EDGES ? SCALES : EDGES];
#if defined(WTYPE_Q4_K)
shared float16_t wmin[STAGES * 16 * BN];  // [16][BN]: the negated block mins, rows BLOCKS..15 zero
shared float16_t xsum[STAGES * BM * 16];  // [BM][16]: xs * the block's code sum, columns BLOCKS..15 zero
#endif

#define FRAG_A coopmat<int8_t, gl_ScopeSubgroup, 16, 32, gl_MatrixUseA>
#define FRAG_B coopmat<int8_t, gl_ScopeSubgroup, 32, 16, gl_MatrixUseB>
#define FRAG_I coopmat<int, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FRAG_HA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_HB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>

uint partial_stride() { return (pc.n_tokens * pc.rows + 63u) / 64u * 64u; }

// ---- raw loads (registers) and their decoding into a stage ---------------------------------------------------------
// Q4_0's 18-byte and Q6_K's 210-byte blocks start at even bytes: 16 of their bytes are 5 words put together.
// The 16 bytes from byte 2 of word a.x (odd) or from a.x; b is the word after a.
uvec4 realign(uvec4 a, uint b, bool odd) {
  return odd ? uvec4((a.x >> 16) | (a.y << 16), (a.y >> 16) | (a.z << 16), (a.z >> 16) | (a.w << 16),
                     (a.w >> 16) | (b << 16))
             : a;
}
#if defined(WTYPE_Q4_K)
// W item i of a K step: row r = i / BLOCKS, code bytes 16 q .. + 16 of the step's (q = i % BLOCKS), within the
// super-block's 128 (qs).
uvec4 load_w(uint i, uint k0) {
  const uint r = min(i / BLOCKS, BN - 1u), row = min(gl_WorkGroupID.x * BN + r, pc.rows - 1u);
  return weight_vec[(row * pc.row_bytes + (k0 >> 8) * 144u + 16u) / 16u + ((k0 & 255u) >> 5) + i % BLOCKS];
}
// qs bytes 32c .. 32c + 32 hold elements 64c + l (low nibbles) and 64c + 32 + l (high): the 16 bytes of item q
// (c = q / 2 chunks into the step, half h = q % 2) go to the step's columns 64c + 16h (low) and 64c + 32 + 16h (high).
void store_w(uvec4 v, uint i, uint s) {
  if (i >= BN * BLOCKS) return;
  const uint st = s * STAGE;
  const uint r = i / BLOCKS, q = i % BLOCKS, c = q / 2u, h = q % 2u;
  const bool inside = gl_WorkGroupID.x * BN + r < pc.rows;
  const uvec4 lo = inside ? v & 0x0F0F0F0Fu : uvec4(0u), hi = inside ? (v >> 4) & 0x0F0F0F0Fu : uvec4(0u);
  codes[st + r * LDS + 4u * c + h] = lo;
  codes[st + r * LDS + 4u * c + 2u + h] = hi;
}
uvec4 load_hdr(uint r, uint k0) {
  const uint row = min(gl_WorkGroupID.x * BN + min(r, BN - 1u), pc.rows - 1u);
  return weight_vec[(row * pc.row_bytes + (k0 >> 8) * 144u) / 16u];
}
// d, dmin and the 12 bytes of 6-bit scales and mins (dequant.glsl's layout): ws = d * sc, wmin = -(dmin * mn), for
// the step's blocks (the super-block's from b0).
void store_hdr(uvec4 v, uint r, uint s, uint b0) {
  if (r >= BN) return;
  const bool inside = gl_WorkGroupID.x * BN + r < pc.rows;
  const vec2 dm = unpackHalf2x16(v.x);
  [[unroll]] for (uint bl = 0; bl < BLOCKS; ++bl) {
    const uvec2 scale_min = dq_k4_scale_min(v.yzw, b0 + bl);
    scratch[WS_BASE + s * BLOCKS * BN + bl * BN + r] = inside ? dm.x * float(scale_min.x) : 0.0;
    wmin[s * 16u * BN + bl * BN + r] = float16_t(inside ? -(dm.y * float(scale_min.y)) : 0.0);
  }
}
#elif defined(WTYPE_Q4_0)
// W item i: row r = i / BLOCKS, block i % BLOCKS of the K step: its 18 bytes (2-byte aligned) as the 5 words that
// cover them.
struct RawW {
  uvec4 a;
  uint b;
  bool odd;  // the block starts 2 bytes into word a.x
};
RawW load_w(uint i, uint k0) {
  const uint r = min(i / BLOCKS, BN - 1u), row = min(gl_WorkGroupID.x * BN + r, pc.rows - 1u);
  const uint blk = row * pc.row_bytes + ((k0 >> 5) + i % BLOCKS) * 18u, w = blk >> 2;
  const uint last = (pc.rows * pc.row_bytes - 1u) >> 2;
  RawW raw;
  raw.a = uvec4(weight_words[w], weight_words[w + 1u], weight_words[w + 2u], weight_words[w + 3u]);
  raw.b = weight_words[min(w + 4u, last)];
  raw.odd = (blk & 2u) != 0u;
  return raw;
}
// The block's codes q - 8 as signed bytes: t = q ^ 8 is q - 8 in 4-bit two's complement, sign-extended per byte.
uint q4_0_signed(uint q) {
  const uint t = q ^ 0x08080808u;
  return t | (((t >> 3) & 0x01010101u) * 0xF0u);
}
void store_w(RawW raw, uint i, uint s) {
  if (i >= BN * BLOCKS) return;
  const uint r = i / BLOCKS, b = i % BLOCKS;
  const bool inside = gl_WorkGroupID.x * BN + r < pc.rows;
  // d, then the 16 code bytes: from byte 2 of a.x (a funnel of 16 bits) or from a.y.
  const float d = unpackHalf2x16(raw.odd ? raw.a.x >> 16 : raw.a.x).x;
  const uvec4 q = raw.odd ? uvec4(raw.a.yzw, raw.b) : realign(raw.a, raw.b, true);
  uvec4 lo = uvec4(q4_0_signed(q.x & 0x0F0F0F0Fu), q4_0_signed(q.y & 0x0F0F0F0Fu), q4_0_signed(q.z & 0x0F0F0F0Fu),
                   q4_0_signed(q.w & 0x0F0F0F0Fu));
  uvec4 hi = uvec4(q4_0_signed((q.x >> 4) & 0x0F0F0F0Fu), q4_0_signed((q.y >> 4) & 0x0F0F0F0Fu),
                   q4_0_signed((q.z >> 4) & 0x0F0F0F0Fu), q4_0_signed((q.w >> 4) & 0x0F0F0F0Fu));
  if (!inside) lo = hi = uvec4(0u);
  codes[s * STAGE + r * LDS + 2u * b] = lo;       // elements 0..15 of the block
  codes[s * STAGE + r * LDS + 2u * b + 1u] = hi;  // elements 16..31
  scratch[WS_BASE + s * BLOCKS * BN + b * BN + r] = inside ? d : 0.0;
}
#elif defined(WTYPE_Q6_K)
uint q6_block(uint row, uint k0) { return row * pc.row_bytes + (k0 >> 8) * 210u; }
// W item i: row r = i / W_PER_ROW, q = i % W_PER_ROW: l = 16 (q % 2) .. + 16 of half h (the step's first + q / 2),
// whose four runs' 64 codes come from ql[64 h + l ..] (runs 0 and 2: low and high nibbles), ql[64 h + 32 + l ..]
// (runs 1 and 3) and qh[32 h + l ..] (2 bits per run), 16 bytes each at the block's 2-byte alignment (5 words).
struct RawW {
  uvec4 a0, a1, a2;  // ql for runs 0 / 2, ql for runs 1 / 3, qh
  uint b0, b1, b2;   // the fifth word of each
  bool odd;          // the block starts 2 bytes into a word
};
RawW load_w(uint i, uint k0) {
  const uint r = min(i / W_PER_ROW, BN - 1u), q = i % W_PER_ROW, row = min(gl_WorkGroupID.x * BN + r, pc.rows - 1u);
  const uint blk = q6_block(row, k0), h = ((k0 & 255u) >> 7) + q / 2u, l = 16u * (q % 2u);
  const uint wa = (blk + 64u * h + l) >> 2, wb = wa + 8u, wq = (blk + 128u + 32u * h + l) >> 2;
  RawW raw;
  raw.a0 = uvec4(weight_words[wa], weight_words[wa + 1u], weight_words[wa + 2u], weight_words[wa + 3u]);
  raw.a1 = uvec4(weight_words[wb], weight_words[wb + 1u], weight_words[wb + 2u], weight_words[wb + 3u]);
  raw.a2 = uvec4(weight_words[wq], weight_words[wq + 1u], weight_words[wq + 2u], weight_words[wq + 3u]);
  raw.b0 = weight_words[wa + 4u];  // all inside the block: the last ql word ends by byte 132, qh's by 196
  raw.b1 = weight_words[wb + 4u];
  raw.b2 = weight_words[wq + 4u];
  raw.odd = (blk & 2u) != 0u;
  return raw;
}
// 6-bit codes v (a low nibble | 2 high bits << 4, per byte) as the signed bytes v - 32: t = v ^ 32 is v - 32 in 6-bit
// two's complement, sign-extended per byte.
uvec4 q6_signed(uvec4 lo4, uvec4 hi2) {
  const uvec4 t = (lo4 | (hi2 << 4)) ^ 0x20202020u;
  return t | (((t >> 5) & 0x01010101u) * 0xC0u);
}
// Run g's 16 codes go to the step's columns 128 (q / 2) + 32 g + 16 (q % 2): uvec4 8 (q / 2) + 2 g + q % 2 of row r.
void store_w(RawW raw, uint i, uint s) {
  if (i >= BN * W_PER_ROW) return;
  const uint r = i / W_PER_ROW, q = i % W_PER_ROW;
  const bool inside = gl_WorkGroupID.x * BN + r < pc.rows;
  const uvec4 qa = realign(raw.a0, raw.b0, raw.odd), qb = realign(raw.a1, raw.b1, raw.odd);
  const uvec4 qh = realign(raw.a2, raw.b2, raw.odd);
  const uint at = s * STAGE + r * LDS + 8u * (q / 2u) + q % 2u;
  [[unroll]] for (uint g = 0; g < 4; ++g) {
    const uvec4 lo = (((g & 1u) != 0u ? qb : qa) >> (4u * (g >> 1))) & 0x0F0F0F0Fu;
    codes[at + 2u * g] = inside ? q6_signed(lo, (qh >> (2u * g)) & 0x03030303u) : uvec4(0u);
  }
}
// The super-block's int8 scales and d: the 5 words from byte 192 (190 when odd), the last clamped to the matrix's.
struct RawH {
  uvec4 a;
  uint b;
  bool odd;
};
RawH load_hdr(uint r, uint k0) {
  const uint row = min(gl_WorkGroupID.x * BN + min(r, BN - 1u), pc.rows - 1u);
  const uint at = q6_block(row, k0) + 192u, w = at >> 2, last = (pc.rows * pc.row_bytes - 1u) >> 2;
  RawH raw;
  raw.a = uvec4(weight_words[w], weight_words[w + 1u], weight_words[w + 2u], weight_words[w + 3u]);
  raw.b = weight_words[min(w + 4u, last)];
  raw.odd = (at & 2u) != 0u;
  return raw;
}
// ws = d * scales[sub] for the step's WSUBS sub-blocks of 16 elements, the super-block's from sub0.
void store_hdr(RawH raw, uint r, uint s, uint sub0) {
  if (r >= BN) return;
  const bool inside = gl_WorkGroupID.x * BN + r < pc.rows;
  const uvec4 sc = realign(raw.a, raw.b, raw.odd);
  const float d = unpackHalf2x16(raw.odd ? raw.b >> 16 : raw.b).x;
  [[unroll]] for (uint u = 0; u < WSUBS; ++u) {
    const uint sub = sub0 + u;
    const int scale = bitfieldExtract(int(sc[sub >> 2]), int(8u * (sub & 3u)), 8);
    scratch[WS_BASE + s * WSUBS * BN + u * BN + r] = inside ? d * float(scale) : 0.0;
  }
}
#endif

// X item i: token t = i / BLOCKS, block b = i % BLOCKS of the K step: 32 codes (2 uvec4) and the block's scale.
struct RawX {
  uvec4 lo, hi;
  float scale;
};
RawX load_x(uint i, uint k0) {
  const uint t = min(gl_WorkGroupID.y * BM + min(i / BLOCKS, BM - 1u), pc.n_tokens - 1u), b = (k0 >> 5) + i % BLOCKS;
  const uint base = t * (pc.cols >> 5) * 9u;  // q8_rows.glsl: the row's first word
  RawX raw;
  raw.lo = xq4[(base >> 2) + 2u * b];
  raw.hi = xq4[(base >> 2) + 2u * b + 1u];
  raw.scale = uintBitsToFloat(xq[base + (pc.cols >> 2) + b]);
  return raw;
}
void store_x(RawX raw, uint i, uint s) {
  if (i >= BM * BLOCKS) return;
  const uint t = i / BLOCKS, b = i % BLOCKS;
  const bool inside = gl_WorkGroupID.y * BM + t < pc.n_tokens;
  codes[s * STAGE + XS_BASE + t * LDX + X_LO * b] = inside ? raw.lo : uvec4(0u);
  codes[s * STAGE + XS_BASE + t * LDX + X_LO * b + X_HI] = inside ? raw.hi : uvec4(0u);
  scratch[XSC_BASE + s * BLOCKS * BM + b * BM + t] = inside ? raw.scale : 0.0;
#if defined(WTYPE_Q4_K)
  const int ones = 0x01010101;
  const int sum = dotPacked4x8EXT(int(raw.lo.x), ones) + dotPacked4x8EXT(int(raw.lo.y), ones) +
                  dotPacked4x8EXT(int(raw.lo.z), ones) + dotPacked4x8EXT(int(raw.lo.w), ones) +
                  dotPacked4x8EXT(int(raw.hi.x), ones) + dotPacked4x8EXT(int(raw.hi.y), ones) +
                  dotPacked4x8EXT(int(raw.hi.z), ones) + dotPacked4x8EXT(int(raw.hi.w), ones);
  xsum[s * BM * 16u + t * 16u + b] = float16_t(inside ? raw.scale * float(sum) : 0.0);
#endif
}

// ---- the K loop ----------------------------------------------------------------------------------------------------
#if defined(WTYPE_Q4_K)
#define RAW_W uvec4
#else
#define RAW_W RawW
#endif
#define W_LOAD(i, k0) if (i < W_ITEMS) rw##i = load_w(tid + i * WG, k0);
#define W_STORE(i, s) if (i < W_ITEMS) store_w(rw##i, tid + i * WG, s);
#define X_LOAD(i, k0) if (i < X_ITEMS) rx##i = load_x(tid + i * WG, k0);
#define X_STORE(i, s) if (i < X_ITEMS) store_x(rx##i, tid + i * WG, s);
#if defined(WTYPE_Q4_K)
#define H_LOAD(k0) rh = load_hdr(tid, k0);
#define H_STORE(s, k0) store_hdr(rh, tid, s, ((k0) & 255u) >> 5);
#elif defined(WTYPE_Q6_K)
#define H_LOAD(k0) rh = load_hdr(tid, k0);
#define H_STORE(s, k0) store_hdr(rh, tid, s, ((k0) & 255u) >> 4);
#else
#define H_LOAD(k0)
#define H_STORE(s, k0)
#endif
#define LOAD_ALL(k0)                                                                                       \
  W_LOAD(0, k0) W_LOAD(1, k0) W_LOAD(2, k0) W_LOAD(3, k0) W_LOAD(4, k0) W_LOAD(5, k0) W_LOAD(6, k0)      \
  W_LOAD(7, k0) X_LOAD(0, k0) X_LOAD(1, k0) X_LOAD(2, k0) X_LOAD(3, k0) H_LOAD(k0)
#define STORE_ALL(s, k0)                                                                                   \
  W_STORE(0, s) W_STORE(1, s) W_STORE(2, s) W_STORE(3, s) W_STORE(4, s) W_STORE(5, s) W_STORE(6, s)      \
  W_STORE(7, s)                                                                                            \
  X_STORE(0, s) X_STORE(1, s) X_STORE(2, s) X_STORE(3, s) H_STORE(s, k0)

// Block b's product for fragment (i, j), scaled into c_ij. The integer product starts at Q8_FLOAT_BIAS (|sums| of 32
// int8 x 6-bit products < 2^22), so each element becomes the sum times ws in one fma given wu = Q8_UNBIAS * ws
// (q8_rows.glsl's q8_biased_scaled; the block scales are f16 times integers of up to 8 bits, exact there), then one
// fma with xs into c_ij: two instructions per element and block, where converting the fragment (FRAG_C(p)) took a
// conversion (on a narrower pipe than fma on NVIDIA's SMs) and the scaling by ws * xs, formed per fragment pair, a
// multiply more (docs/benchmarks.md, "op_matmul.cpp's rules").
#if defined(WTYPE_Q6_K)
// Two products per block (ah: X's upper half), scaled by their sub-blocks' ws and wh.
#define BLOCK_MMA(i, j)                                                                                      \
  if (i < FM && j < FN) {                                                                                   \
    const FRAG_I p = coopMatMulAdd(a##i, b##j, FRAG_I(Q8_FLOAT_BIAS));                                      \
    const FRAG_I ph = coopMatMulAdd(ah##i, b##j, FRAG_I(Q8_FLOAT_BIAS));                                    \
    for (int e = 0; e < p.length(); ++e)                                                                    \
      c##i##j[e] += (q8_biased_scaled(p[e], ws##j[e], wu##j[e]) +                                           \
                     q8_biased_scaled(ph[e], wh##j[e], whu##j[e])) * xs##i[e];                              \
  }
#define A_HI_LOAD(i)                                                                      \
  coopMatLoad(ah##i, codes, s * STAGE + XS_BASE + i * 16u * LDX + X_LO * b + 1u, LDX,      \
              gl_CooperativeMatrixLayoutRowMajor);
#define WS_HI_LOAD(j)                                                                     \
  coopMatLoad(wh##j, scratch, WS_BASE + s * WSUBS * BN + (2u * b + 1u) * BN + sn * SN + j * 16u, 0, \
              gl_CooperativeMatrixLayoutRowMajor);                                              \
  whu##j = wh##j * Q8_UNBIAS;
#define WS_SUB (2u * b)
#else
#define BLOCK_MMA(i, j)                                                                                      \
  if (i < FM && j < FN) {                                                                                   \
    const FRAG_I p = coopMatMulAdd(a##i, b##j, FRAG_I(Q8_FLOAT_BIAS));                                      \
    for (int e = 0; e < p.length(); ++e) c##i##j[e] += q8_biased_scaled(p[e], ws##j[e], wu##j[e]) * xs##i[e]; \
  }
#define A_HI_LOAD(i)
#define WS_HI_LOAD(j)
#define WS_SUB b
#endif
#define A_LOAD(i)                                                                                            \
  if (i < FM) {                                                                                             \
    coopMatLoad(a##i, codes, s * STAGE + XS_BASE + i * 16u * LDX + X_LO * b, LDX, gl_CooperativeMatrixLayoutRowMajor); \
    A_HI_LOAD(i)                                                                                            \
    coopMatLoad(xs##i, scratch, XSC_BASE + s * BLOCKS * BM + b * BM + i * 16u, 0, gl_CooperativeMatrixLayoutColumnMajor); \
  }
#define B_LOAD(j)                                                                                            \
  if (j < FN) {                                                                                             \
    coopMatLoad(b##j, codes, s * STAGE + (sn * SN + j * 16u) * LDS + 2u * b, LDS, gl_CooperativeMatrixLayoutColumnMajor); \
    coopMatLoad(ws##j, scratch, WS_BASE + s * WSUBS * BN + WS_SUB * BN + sn * SN + j * 16u, 0, gl_CooperativeMatrixLayoutRowMajor); \
    wu##j = ws##j * Q8_UNBIAS;                                                                              \
    WS_HI_LOAD(j)                                                                                           \
  }
#define MMA_ROW(i) BLOCK_MMA(i, 0) BLOCK_MMA(i, 1) BLOCK_MMA(i, 2) BLOCK_MMA(i, 3)
#define MIN_A(i) if (i < FM) coopMatLoad(ha##i, xsum, s * BM * 16u + i * 256u, 16, gl_CooperativeMatrixLayoutRowMajor);
#define MIN_B(j) \
  if (j < FN) coopMatLoad(hb##j, wmin, s * 16u * BN + sn * SN + j * 16u, BN, gl_CooperativeMatrixLayoutRowMajor);
#define MIN_MMA(i, j) if (i < FM && j < FN) c##i##j = coopMatMulAdd(ha##i, hb##j, c##i##j);
#define MIN_ROW(i) MIN_MMA(i, 0) MIN_MMA(i, 1) MIN_MMA(i, 2) MIN_MMA(i, 3)

// The K step on stage s.
#define COMPUTE()                                                                                            \
  {                                                                                                          \
    [[unroll]] for (uint b = 0; b < BLOCKS; ++b) {                                                           \
      FRAG_A a0, a1, a2, a3, ah0, ah1, ah2, ah3;                                                             \
      FRAG_B b0, b1, b2, b3;                                                                                 \
      FRAG_C xs0, xs1, xs2, xs3, ws0, ws1, ws2, ws3, wh0, wh1, wh2, wh3;                                     \
      FRAG_C wu0, wu1, wu2, wu3, whu0, whu1, whu2, whu3; /* Q8_UNBIAS ws, Q8_UNBIAS wh */                    \
      A_LOAD(0) A_LOAD(1) A_LOAD(2) A_LOAD(3)                                                                \
      B_LOAD(0) B_LOAD(1) B_LOAD(2) B_LOAD(3)                                                                \
      MMA_ROW(0) MMA_ROW(1) MMA_ROW(2) MMA_ROW(3)                                                            \
    }                                                                                                        \
    MIN_TERMS()                                                                                              \
  }
#if defined(WTYPE_Q4_K)
#define MIN_TERMS()                                                                                          \
    {                                                                                                        \
      FRAG_HA ha0, ha1, ha2, ha3;                                                                            \
      FRAG_HB hb0, hb1, hb2, hb3;                                                                            \
      MIN_A(0) MIN_A(1) MIN_A(2) MIN_A(3)                                                                    \
      MIN_B(0) MIN_B(1) MIN_B(2) MIN_B(3)                                                                    \
      MIN_ROW(0) MIN_ROW(1) MIN_ROW(2) MIN_ROW(3)                                                            \
    }
#else
#define MIN_TERMS()
#endif

// Output block (i, j): straight to y (or the partial) when whole, adding y's block loaded as a fragment with
// ACCUMULATE, else element by element through the subgroup's f32 tile.
#define STORE_C(i, j)                                                                                         \
  if (i < FM && j < FN) {                                                                                     \
    const uint bm = m0 + i * 16u, bn = n0 + sn * SN + j * 16u;                                                \
    const bool whole = bm + 16u <= pc.n_tokens && bn + 16u <= pc.rows;                                        \
    if (whole && z > 0u) {                                                                                    \
      coopMatStore(c##i##j, part, part0 + bm * pc.rows + bn, pc.rows, gl_CooperativeMatrixLayoutRowMajor);     \
    } else if (whole) {                                                                                       \
      const uint at = bm * pc.out_stride + pc.out_row0 + bn;                                                  \
      if (ACCUMULATE) {                                                                                       \
        FRAG_C prior;                                                                                         \
        coopMatLoad(prior, y, at, pc.out_stride, gl_CooperativeMatrixLayoutRowMajor);                          \
        c##i##j += prior;                                                                                     \
      }                                                                                                       \
      coopMatStore(c##i##j, y, at, pc.out_stride, gl_CooperativeMatrixLayoutRowMajor);                         \
    } else {                                                                                                  \
      coopMatStore(c##i##j, scratch, sn * 256u, 16, gl_CooperativeMatrixLayoutRowMajor);                      \
      subgroupMemoryBarrierShared();                                                                          \
      subgroupBarrier();                                                                                      \
      for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {                                \
        const uint m = bm + e / 16u, n = bn + e % 16u;                                                        \
        if (m < pc.n_tokens && n < pc.rows) {                                                                 \
          const float v = scratch[sn * 256u + e];                                                             \
          if (z > 0u) {                                                                                       \
            part[part0 + m * pc.rows + n] = v;                                                                \
          } else {                                                                                            \
            const uint at = m * pc.out_stride + pc.out_row0 + n;                                              \
            y[at] = ACCUMULATE ? y[at] + v : v;                                                               \
          }                                                                                                   \
        }                                                                                                     \
      }                                                                                                       \
      subgroupBarrier();                                                                                      \
    }                                                                                                         \
  }
#define STORE_ROW(i) STORE_C(i, 0) STORE_C(i, 1) STORE_C(i, 2) STORE_C(i, 3)

void main() {
  const uint tid = gl_LocalInvocationID.x, sn = gl_SubgroupID;
  const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM, z = gl_WorkGroupID.z;
  const uint steps = pc.cols / BK, per_split = (steps + SPLIT_K - 1) / SPLIT_K;
  const uint k_begin = z * per_split * BK, k_end = min(pc.cols, k_begin + per_split * BK);
  const uint part0 = z > 0u ? (z - 1u) * partial_stride() : 0u;
  FRAG_C c00 = FRAG_C(0.0), c01 = FRAG_C(0.0), c02 = FRAG_C(0.0), c03 = FRAG_C(0.0);
  FRAG_C c10 = FRAG_C(0.0), c11 = FRAG_C(0.0), c12 = FRAG_C(0.0), c13 = FRAG_C(0.0);
  FRAG_C c20 = FRAG_C(0.0), c21 = FRAG_C(0.0), c22 = FRAG_C(0.0), c23 = FRAG_C(0.0);
  FRAG_C c30 = FRAG_C(0.0), c31 = FRAG_C(0.0), c32 = FRAG_C(0.0), c33 = FRAG_C(0.0);
  RAW_W rw0, rw1, rw2, rw3, rw4, rw5, rw6, rw7;
  RawX rx0, rx1, rx2, rx3;
#if defined(WTYPE_Q6_K)
  RawH rh;
  // The zeros between X's block halves, in every stage.
  for (uint e = tid; e < STAGES * BM * BLOCKS; e += WG)
    codes[(e / (BM * BLOCKS)) * STAGE + XS_BASE + (e / BLOCKS) % BM * LDX + X_LO * (e % BLOCKS) + 1u] = uvec4(0u);
#endif
#if defined(WTYPE_Q4_K)
  uvec4 rh;
  // The min terms' padding (blocks BLOCKS..15) stays zero in every stage.
  const uint pad = 16u - BLOCKS;
  for (uint e = tid; e < STAGES * pad * BN; e += WG)
    wmin[(e / (pad * BN)) * 16u * BN + BLOCKS * BN + e % (pad * BN)] = float16_t(0.0);
  for (uint e = tid; e < STAGES * BM * pad; e += WG) xsum[(e / pad) * 16u + BLOCKS + e % pad] = float16_t(0.0);
#endif
  if (k_begin < k_end) {
    LOAD_ALL(k_begin)
    STORE_ALL(0u, k_begin)
  }
  barrier();
  uint s = 0;
  for (uint k = k_begin; k < k_end; k += BK, s = (s + 1u) % STAGES) {
    const bool more = k + BK < k_end;
    if (more) { LOAD_ALL(k + BK) }
    COMPUTE()
    if (STAGES == 1u) barrier();  // every subgroup is done reading the stage that the store overwrites
    if (more) { STORE_ALL((s + 1u) % STAGES, k + BK) }
    barrier();
  }
  STORE_ROW(0) STORE_ROW(1) STORE_ROW(2) STORE_ROW(3)
}
