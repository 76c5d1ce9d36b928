#version 450
// Grouped expert GEMM for prefill and batched steps (engine::MoeMatMulOp), after moe_group.comp: one dispatch over
// (column tile of the out_features rows, tile of one expert's slots). For tile y = (expert e, slots sorted[first ..
// first + rows)) and slot i = sorted[first + m]:
//   out[i, r] = dot(weight row e * out_features + r, in row) (+ bias[e, r]),  in row = i (per_slot) or i / k
// Workgroups past the step's tile count (tiles[0]; the grid is sized for the most tiles a step can have) return at
// once. Tiling is matmul_tiled.comp's: a BM x BN tile of C per workgroup (spec constants 1, 2; BM/4 * BN/4 = the
// workgroup size, spec constant 0), K in steps of BK (spec constant 3) staged k-major in shared memory, the weight
// dequantized by dequant.glsl (WTYPE_*), 4 x 4 accumulators per invocation. K (cols) % 4 == 0: rows of X are vec4.
// Each output is one dot product over K in a fixed order, whichever tile holds its slot, so the result of a slot
// does not depend on which other tokens chose the same expert.
// The weight may be split at whole rows: one dispatch per chunk (rows [row_begin, row_begin + chunk_rows)), each
// writing the outputs whose weight row it holds.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer X { vec4 x4[]; };
layout(binding = 2) readonly buffer Sorted { uint sorted[]; };
layout(binding = 3) readonly buffer Tiles { uint tiles[]; };
layout(binding = 4) writeonly buffer Y { float y[]; };
layout(binding = 5) readonly buffer Bias { float bias[]; };  // [n_experts, out_features] when has_bias
layout(push_constant) uniform Push {
  uint row_bytes; uint row_begin; uint chunk_rows; uint cols; uint out_features; uint k; uint per_slot;
  uint has_bias;
} pc;
#include "dequant.glsl"

const uint TM = 4, TN = 4;
shared float xs[BK * BM];
shared float ws[BK * BN];
shared uint slot_of[BM];  // the tile's slots (rows of C)

void main() {
  const uint tile = gl_WorkGroupID.y;
  if (tile >= tiles[0]) return;  // uniform: the whole workgroup leaves before any barrier
  const uint e = tiles[1 + 3 * tile], first = tiles[2 + 3 * tile], n_rows = tiles[3 + 3 * tile];
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint n0 = gl_WorkGroupID.x * BN;
  const uint tn = tid % (BN / TN), tm = tid / (BN / TN);
  for (uint m = tid; m < BM; m += wg) slot_of[m] = m < n_rows ? sorted[first + m] : 0u;
  barrier();
  float acc[TM][TN];
  for (uint i = 0; i < TM; ++i)
    for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;
  const uint lrow0 = e * pc.out_features + n0 - pc.row_begin;  // the tile's first weight row in this chunk

  for (uint k0 = 0; k0 < pc.cols; k0 += BK) {
    for (uint item = tid; item < BN * (BK / 4); item += wg) {
      const uint n = item / (BK / 4), kk = (item % (BK / 4)) * 4;
      const uint lrow = lrow0 + n;
      vec4 v = vec4(0.0);
      if (n0 + n < pc.out_features && lrow < pc.chunk_rows && k0 + kk < pc.cols) v = dequant4(lrow * pc.row_bytes, k0 + kk);
      ws[(kk + 0) * BN + n] = v.x;
      ws[(kk + 1) * BN + n] = v.y;
      ws[(kk + 2) * BN + n] = v.z;
      ws[(kk + 3) * BN + n] = v.w;
    }
    for (uint item = tid; item < BM * (BK / 4); item += wg) {
      const uint m = item / (BK / 4), kk = (item % (BK / 4)) * 4;
      vec4 v = vec4(0.0);
      if (m < n_rows && k0 + kk < pc.cols) {
        const uint slot = slot_of[m], row = pc.per_slot != 0 ? slot : slot / pc.k;
        v = x4[(row * pc.cols + k0 + kk) / 4];
      }
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
    const uint m = tm * TM + i;
    if (m >= n_rows) continue;
    const uint slot = slot_of[m];
    for (uint j = 0; j < TN; ++j) {
      const uint n = n0 + tn * TN + j;
      if (n < pc.out_features && lrow0 + tn * TN + j < pc.chunk_rows) {
        const float b = pc.has_bias != 0 ? bias[e * pc.out_features + n] : 0.0;
        y[slot * pc.out_features + n] = acc[i][j] + b;
      }
    }
  }
}
