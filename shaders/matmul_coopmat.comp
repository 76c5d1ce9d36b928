#version 450
// Matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix, 16x16x16 f16 x f16 -> f32) for one
// weight type (WTYPE_*): the same contract as matmul_tiled.comp,
//   y[t, out_row0 + r] = dot(weight row r, x[t, :])   C[M=tokens, N=rows] = X[M, K] * W[N, K]^T, K % 4 == 0.
//
// Tiling: a workgroup of WM x WN subgroups (spec constants 3 and 4; local size = WM * WN * the subgroup size, spec
// constant 0; the host pins the subgroup size and requires full subgroups) computes a BM x BN tile of C (spec
// constants 1 and 2); subgroup s owns the (BM/WM) x (BN/WN) block (s / WN, s % WN) as FM x FN (each <= 4)
// accumulator fragments of 16 x 16. K advances in steps of BK (spec constant 6, 32 by default): X[BM, BK] (converted to f16) and the
// dequantized W[BN, BK] (f16) are staged in shared memory as uvec4 (8 halves), both row-major by their M / N index
// with a padded stride of LDS uvec4 (80 bytes for BK = 32), so W's tile read column-major is
// exactly B = W^T [K, N]. The next K step's global loads are issued into registers before the current step's
// multiply-adds, so their latency hides behind the matrix work.
//
// Fragments are named variables (a0..a3, b0..b3, c00..c33) guarded by spec-constant conditions, not arrays indexed
// in loops: on the NVIDIA H100 driver, arrays of cooperative matrices with spec-constant loop bounds ran the
// multiply-adds at ~28 TFLOP/s, named fragments at 63 (same tile, f16, 4096^3).
// Full 16 x 16 output blocks are stored straight to y; blocks at the matrix edges go through a per-subgroup
// 16 x 16 f32 staging tile with bounds checks.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
#if defined(X_F16)
layout(binding = 1) readonly buffer X { uvec2 xh[]; };  // X already f16 (convert_f16.comp): 4 halves per element
#else
layout(binding = 1) readonly buffer X { vec4 x4[]; };  // K % 4 == 0: every row of X starts on a vec4
#endif
layout(binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform Push {
  uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride; uint n_tokens;
} pc;
#include "dequant.glsl"

layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint WM = 2;
layout(constant_id = 4) const uint WN = 2;
layout(constant_id = 5) const bool ACCUMULATE = false;  // y += W x (a fused residual add) instead of y = W x
layout(constant_id = 6) const uint BK = 32;  // a multiple of 16
const uint SM = BM / WM, SN = BN / WN;  // one subgroup's block of C
const uint FM = SM / 16, FN = SN / 16;  // its fragments along M and N (the host keeps both <= 4)
const uint G = BK / 8;                  // uvec4 (8 halves) per staged row
const uint LDS = G + 1;                 // row stride in uvec4: odd, so 16-byte fragment rows hit distinct banks
const uint WG = gl_WorkGroupSize.x;
const uint W_ITEMS = (BN * G + WG - 1) / WG;  // uvec4 staged per invocation and K step (host: <= 4)
const uint X_ITEMS = (BM * G + WG - 1) / WG;
shared uvec4 xs[BM * LDS];
shared uvec4 ws[BN * LDS];
shared float cs[WM * WN * 256];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

uvec4 pack8(vec4 lo, vec4 hi) {
  return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
}

// Elements k..k+7 of weight row n (zeros past the matrix) as 8 halves. K % 4 == 0, so the second half of the 8 is
// either wholly inside the row or wholly past it.
uvec4 load_w8(uint n, uint k) {
  if (n >= pc.rows || k >= pc.cols) return uvec4(0);
  const uint row = n * pc.row_bytes;
#if defined(WTYPE_F16)
  const uint b = row + 2u * k;  // already f16: copy the words
  return uvec4(read_u32_unaligned(b), read_u32_unaligned(b + 4u),
               k + 4u < pc.cols ? read_u32_unaligned(b + 8u) : 0u, k + 4u < pc.cols ? read_u32_unaligned(b + 12u) : 0u);
#elif defined(WTYPE_Q4_K)
  // k % 8 == 0, so the 8 elements share one 32-element sub-block: its 6-bit scale and min are decoded once and the
  // codes come from 2 words (144-byte super-blocks keep rows word-aligned), where two dequant4 calls read the block
  // header, scale bytes and codes twice. Same expression as dequant.glsl: w = (d * sc) * q - dmin * mn.
  const uint blk = (row >> 2) + (k >> 8) * 36u, j = k & 255u, s = j >> 5;
  const vec2 dm = unpackHalf2x16(weight_words[blk]);
  const uint w1 = weight_words[blk + 1u], w2 = weight_words[blk + 2u], w3 = weight_words[blk + 3u];  // scales[12]
  uint sc, mn;
  if (s < 4u) {
    sc = (w1 >> (8u * s)) & 63u;  // scales[s]
    mn = (w2 >> (8u * s)) & 63u;  // scales[s + 4]
  } else {
    const uint t = 8u * (s - 4u), packed = (w3 >> t) & 0xFFu;  // scales[s + 4]
    sc = (packed & 0x0Fu) | (((w1 >> (t + 6u)) & 3u) << 4);     // high bits from scales[s - 4]
    mn = (packed >> 4) | (((w2 >> (t + 6u)) & 3u) << 4);        // high bits from scales[s]
  }
  const uint q0 = blk + 4u + 8u * (j >> 6) + ((j & 31u) >> 2), shift = (j & 32u) >> 3;
  const uvec4 lo = dq_bytes(weight_words[q0] >> shift) & 0x0Fu, hi = dq_bytes(weight_words[q0 + 1u] >> shift) & 0x0Fu;
  precise const float d1 = dm.x * float(sc), m1 = dm.y * float(mn);
  precise const vec4 a = d1 * vec4(lo) - m1, b = d1 * vec4(hi) - m1;
  return pack8(a, b);
#else
  return pack8(dequant4(row, k), k + 4u < pc.cols ? dequant4(row, k + 4u) : vec4(0.0));
#endif
}

// Elements k..k+7 of activation row m (zeros past the matrix) as 8 halves.
uvec4 load_x8(uint m, uint k) {
  if (m >= pc.n_tokens || k >= pc.cols) return uvec4(0);
  const uint at = (m * pc.cols + k) / 4u;
#if defined(X_F16)
  const uvec2 lo = xh[at], hi = k + 4u < pc.cols ? xh[at + 1u] : uvec2(0u);
  return uvec4(lo, hi);
#else
  return pack8(x4[at], k + 4u < pc.cols ? x4[at + 1u] : vec4(0.0));
#endif
}

// Staging item i of this invocation: row (item / G) of the tile, columns 8 * (item % G) .. + 7.
#define W_LOAD(i) if (i < W_ITEMS && tid + i * WG < BN * G) wr##i = load_w8(n0 + (tid + i * WG) / G, k0 + 8 * ((tid + i * WG) % G));
#define X_LOAD(i) if (i < X_ITEMS && tid + i * WG < BM * G) xr##i = load_x8(m0 + (tid + i * WG) / G, k0 + 8 * ((tid + i * WG) % G));
#define W_STORE(i) if (i < W_ITEMS && tid + i * WG < BN * G) ws[((tid + i * WG) / G) * LDS + (tid + i * WG) % G] = wr##i;
#define X_STORE(i) if (i < X_ITEMS && tid + i * WG < BM * G) xs[((tid + i * WG) / G) * LDS + (tid + i * WG) % G] = xr##i;
#define LOAD_ALL W_LOAD(0) W_LOAD(1) W_LOAD(2) W_LOAD(3) X_LOAD(0) X_LOAD(1) X_LOAD(2) X_LOAD(3)
#define STORE_ALL W_STORE(0) W_STORE(1) W_STORE(2) W_STORE(3) X_STORE(0) X_STORE(1) X_STORE(2) X_STORE(3)

#define A_LOAD(i) if (i < FM) coopMatLoad(a##i, xs, (sm * SM + i * 16) * LDS + ks, LDS, gl_CooperativeMatrixLayoutRowMajor);
#define B_LOAD(j) if (j < FN) coopMatLoad(b##j, ws, (sn * SN + j * 16) * LDS + ks, LDS, gl_CooperativeMatrixLayoutColumnMajor);
#define MMA(i, j) if (i < FM && j < FN) c##i##j = coopMatMulAdd(a##i, b##j, c##i##j);
#define MMA_ROW(i) MMA(i, 0) MMA(i, 1) MMA(i, 2) MMA(i, 3)

// Output block (i, j) of this subgroup: straight to y when whole, else through cs with bounds checks.
#define STORE_C(i, j)                                                                                         \
  if (i < FM && j < FN) {                                                                                     \
    const uint bm = m0 + sm * SM + i * 16, bn = n0 + sn * SN + j * 16;                                        \
    if (bm + 16 <= pc.n_tokens && bn + 16 <= pc.rows) {                                                       \
      const uint at = bm * pc.out_stride + pc.out_row0 + bn;                                                  \
      if (ACCUMULATE) {                                                                                       \
        FRAG_C prior;                                                                                         \
        coopMatLoad(prior, y, at, pc.out_stride, gl_CooperativeMatrixLayoutRowMajor);                         \
        c##i##j += prior;                                                                                     \
      }                                                                                                       \
      coopMatStore(c##i##j, y, at, pc.out_stride, gl_CooperativeMatrixLayoutRowMajor);                        \
    } else {                                                                                                  \
      coopMatStore(c##i##j, cs, sg * 256, 16, gl_CooperativeMatrixLayoutRowMajor);                            \
      subgroupMemoryBarrierShared();                                                                          \
      subgroupBarrier();                                                                                      \
      for (uint e = gl_SubgroupInvocationID; e < 256; e += gl_SubgroupSize) {                                 \
        const uint m = bm + e / 16, n = bn + e % 16;                                                          \
        if (m < pc.n_tokens && n < pc.rows) {                                                                 \
          const uint at = m * pc.out_stride + pc.out_row0 + n;                                                \
          y[at] = ACCUMULATE ? y[at] + cs[sg * 256 + e] : cs[sg * 256 + e];                                   \
        }                                                                                                     \
      }                                                                                                       \
      subgroupBarrier();                                                                                      \
    }                                                                                                         \
  }
#define STORE_ROW(i) STORE_C(i, 0) STORE_C(i, 1) STORE_C(i, 2) STORE_C(i, 3)

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, sm = sg / WN, sn = sg % WN;
  const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
  FRAG_C c00 = FRAG_C(0.0), c01 = FRAG_C(0.0), c02 = FRAG_C(0.0), c03 = FRAG_C(0.0);
  FRAG_C c10 = FRAG_C(0.0), c11 = FRAG_C(0.0), c12 = FRAG_C(0.0), c13 = FRAG_C(0.0);
  FRAG_C c20 = FRAG_C(0.0), c21 = FRAG_C(0.0), c22 = FRAG_C(0.0), c23 = FRAG_C(0.0);
  FRAG_C c30 = FRAG_C(0.0), c31 = FRAG_C(0.0), c32 = FRAG_C(0.0), c33 = FRAG_C(0.0);
  uvec4 wr0, wr1, wr2, wr3, xr0, xr1, xr2, xr3;

  uint k0 = 0;
  LOAD_ALL
  for (; k0 < pc.cols;) {
    STORE_ALL
    barrier();
    k0 += BK;
    if (k0 < pc.cols) { LOAD_ALL }  // the next step's loads, in flight during the multiply-adds below
    [[unroll]] for (uint ks = 0; ks < G; ks += 2) {  // 16 halves = 2 uvec4 per fragment step
      FRAG_A a0, a1, a2, a3;
      FRAG_B b0, b1, b2, b3;
      A_LOAD(0) A_LOAD(1) A_LOAD(2) A_LOAD(3)
      B_LOAD(0) B_LOAD(1) B_LOAD(2) B_LOAD(3)
      MMA_ROW(0) MMA_ROW(1) MMA_ROW(2) MMA_ROW(3)
    }
    barrier();
  }
  STORE_ROW(0) STORE_ROW(1) STORE_ROW(2) STORE_ROW(3)
}
