#version 450
// Tiled matrix-matrix product for one weight type (WTYPE_*), the prefill path without cooperative matrices:
//   y[t, out_row0 + r] = dot(weight row r, x[t, :])   for t < n_tokens, r < rows (one bound weight chunk).
// In GEMM terms C[M=tokens, N=rows] = X[M, K] * W[N, K]^T with K = cols (a multiple of 4; the host uses the matvec
// path otherwise).
//
// Tiling: a workgroup computes a BM x BN tile of C (spec constants 1, 2; BM/4 * BN/4 must equal the workgroup size,
// spec constant 0), walking K in steps of BK (spec constant 3, a multiple of 4). Each step stages X[BM, BK] and the
// dequantized W[BN, BK] in shared memory, k-major (xs[k][m], ws[k][n]) so the inner loop reads 4 consecutive m and
// 4 consecutive n; each invocation accumulates a 4 x 4 block of C in registers. Workgroup (x, y) = (row tile,
// token tile).
// Split-K (spec constant 5, for grids too small to fill the device: a MoE router's 128 rows over 512 tokens is 16
// tiles): workgroup z multiplies K steps [z * KC, (z + 1) * KC), KC = K / SPLIT_K rounded up to whole K steps; z = 0
// writes y, z > 0 its partial C[M, N] (row stride N = pc.rows, one weight chunk) at (z - 1) * partial_stride() of the
// Partial buffer, and the host adds the partials into y afterwards (add_splits.comp), as matmul_coopmat.comp's.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const bool ACCUMULATE = false;  // y += W x (a fused residual add) instead of y = W x
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };  // K % 4 == 0: every row of X starts on a vec4
layout(binding = 2) buffer Y { float y[]; };
layout(binding = 3) writeonly buffer Partial { float part[]; };  // SPLIT_K == 1: y again, never written
layout(constant_id = 5) const uint SPLIT_K = 1;
layout(push_constant) uniform Push {
  uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride; uint n_tokens;
} pc;
#include "dequant.glsl"

const uint TM = 4, TN = 4;
shared float xs[BK * BM];
shared float ws[BK * BN];

// Floats between two splits' partials: M * N rounded up to 64 (op_matmul.cpp computes the same).
uint partial_stride() { return (pc.n_tokens * pc.rows + 63u) / 64u * 64u; }

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
  const uint tn = tid % (BN / TN), tm = tid / (BN / TN);
  float acc[TM][TN];
  for (uint i = 0; i < TM; ++i)
    for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;

  const uint z = gl_WorkGroupID.z;
  const uint KC = ((pc.cols + SPLIT_K - 1u) / SPLIT_K + BK - 1u) / BK * BK;
  const uint K = min(pc.cols, (z + 1u) * KC);
  for (uint k0 = z * KC; k0 < K; k0 += BK) {
    // Stage W: BN rows x BK/4 groups of 4.
    for (uint item = tid; item < BN * (BK / 4); item += wg) {
      const uint n = item / (BK / 4), kk = (item % (BK / 4)) * 4;
      vec4 v = vec4(0.0);
      if (n0 + n < pc.rows && k0 + kk < pc.cols) v = dequant4((n0 + n) * pc.row_bytes, k0 + kk);
      ws[(kk + 0) * BN + n] = v.x;
      ws[(kk + 1) * BN + n] = v.y;
      ws[(kk + 2) * BN + n] = v.z;
      ws[(kk + 3) * BN + n] = v.w;
    }
    // Stage X: BM tokens x BK columns, 4 columns per load.
    for (uint item = tid; item < BM * (BK / 4); item += wg) {
      const uint m = item / (BK / 4), kk = (item % (BK / 4)) * 4;
      const vec4 v = (m0 + m < pc.n_tokens && k0 + kk < pc.cols) ? x4[((m0 + m) * pc.cols + k0 + kk) / 4] : vec4(0.0);
      xs[(kk + 0) * BM + m] = v.x;
      xs[(kk + 1) * BM + m] = v.y;
      xs[(kk + 2) * BM + m] = v.z;
      xs[(kk + 3) * BM + m] = v.w;
    }
    barrier();
    for (uint kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (uint i = 0; i < TM; ++i) a[i] = xs[kk * BM + tm * TM + i];
      for (uint j = 0; j < TN; ++j) b[j] = ws[kk * BN + tn * TN + j];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    barrier();
  }
  for (uint i = 0; i < TM; ++i) {
    const uint m = m0 + tm * TM + i;
    if (m >= pc.n_tokens) continue;
    for (uint j = 0; j < TN; ++j) {
      const uint n = n0 + tn * TN + j;
      if (n >= pc.rows) continue;
      if (z > 0u) {
        part[(z - 1u) * partial_stride() + m * pc.rows + n] = acc[i][j];
      } else {
        const uint at = m * pc.out_stride + pc.out_row0 + n;
        y[at] = ACCUMULATE ? y[at] + acc[i][j] : acc[i][j];
      }
    }
  }
}
