#version 450
// Matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix, 16x16x16 f16 x f16 -> f32) for one
// weight type (WTYPE_*): the same contract as matmul_tiled.comp,
//   y[t, out_row0 + r] = dot(weight row r, x[t, :])   C[M=tokens, N=rows] = X[M, K] * W[N, K]^T, K % 4 == 0.
//
// Tiling: a workgroup of WM x WN subgroups (spec constants 3 and 4; local size = WM * WN * the subgroup size, spec
// constant 0; the host pins the subgroup size and requires full subgroups) computes a BM x BN tile of C (spec
// constants 1 and 2); subgroup s owns the (BM/WM) x (BN/WN) block (s / WN, s % WN) as FM x FN accumulator
// fragments of 16 x 16, so each staged element feeds FM or FN matrix multiply-adds. K advances in steps of BK = 32: X[BM, 32]
// (converted to f16) and the dequantized W[BN, 32] (f16) are staged in shared memory, both row-major by their M / N
// index with a padded stride LDS, so W's tile read column-major is exactly B = W^T [K, N]. Results go through a per-subgroup 16 x 16 f32
// staging tile so that partial tiles at the matrix edges are written with bounds checks.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };  // K % 4 == 0: every row of X starts on a vec4
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
const uint BK = 32;
const uint SM = BM / WM, SN = BN / WN;  // one subgroup's block of C
const uint FM = SM / 16, FN = SN / 16;  // its fragments along M and N
const uint LDS = BK + 8;  // f16 elements per staged row: 80 bytes, keeps fragment loads 16-byte aligned
const uint LDS4 = LDS / 4;
// Staged as f16vec4 (one 8-byte store per 4 values); coopMatLoad counts offsets and strides in f16vec4 units here.
// (Measured on the H100: prefetching the next K step into registers during the MMAs, 128 x 128 tiles and 8-16
// subgroups all stayed at 23-27 TFLOP/s: see op_matmul.cpp.)
shared f16vec4 xs[BM * LDS4];
shared f16vec4 ws[BN * LDS4];
shared float cs[WM * WN * 256];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint sg = gl_SubgroupID, sm = sg / WN, sn = sg % WN;
  const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
  FRAG_C acc[FM * FN];
  for (uint i = 0; i < FM * FN; ++i) acc[i] = FRAG_C(0.0);

  for (uint k0 = 0; k0 < pc.cols; k0 += BK) {
    for (uint item = tid; item < BN * (BK / 4); item += wg) {
      const uint n = item / (BK / 4), kk = (item % (BK / 4)) * 4;
      vec4 v = vec4(0.0);
      if (n0 + n < pc.rows && k0 + kk < pc.cols) v = dequant4((n0 + n) * pc.row_bytes, k0 + kk);
      ws[n * LDS4 + kk / 4] = f16vec4(v);
    }
    for (uint item = tid; item < BM * (BK / 4); item += wg) {
      const uint m = item / (BK / 4), kk = (item % (BK / 4)) * 4;
      vec4 v = vec4(0.0);
      if (m0 + m < pc.n_tokens && k0 + kk < pc.cols) {
        v = x4[((m0 + m) * pc.cols + k0 + kk) / 4];
      }
      xs[m * LDS4 + kk / 4] = f16vec4(v);
    }
    barrier();
    for (uint ks = 0; ks < BK; ks += 16) {
      FRAG_A a[FM];
      FRAG_B b[FN];
      for (uint i = 0; i < FM; ++i)
        coopMatLoad(a[i], xs, (sm * SM + i * 16) * LDS4 + ks / 4, LDS4, gl_CooperativeMatrixLayoutRowMajor);
      for (uint j = 0; j < FN; ++j)
        coopMatLoad(b[j], ws, (sn * SN + j * 16) * LDS4 + ks / 4, LDS4, gl_CooperativeMatrixLayoutColumnMajor);
      for (uint i = 0; i < FM; ++i)
        for (uint j = 0; j < FN; ++j) acc[i * FN + j] = coopMatMulAdd(a[i], b[j], acc[i * FN + j]);
    }
    barrier();
  }

  for (uint i = 0; i < FM; ++i)
    for (uint j = 0; j < FN; ++j) {
      coopMatStore(acc[i * FN + j], cs, sg * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = gl_SubgroupInvocationID; e < 256; e += gl_SubgroupSize) {
        const uint m = m0 + sm * SM + i * 16 + e / 16, n = n0 + sn * SN + j * 16 + e % 16;
        if (m < pc.n_tokens && n < pc.rows) {
          const uint at = m * pc.out_stride + pc.out_row0 + n;
          y[at] = ACCUMULATE ? y[at] + cs[sg * 256 + e] : cs[sg * 256 + e];
        }
      }
      subgroupBarrier();
    }
}
