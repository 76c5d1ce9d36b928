#version 450
// Expert matmul for a few tokens (engine::MoeMatMulOp, decode): for every slot (t, s) and output row r,
//   out[t, s, r] = dot(row e * out_features + r of the expert weight, in row) (+ bias[e, r]),  e = experts[t, s]
// with in row = t * k + s (per_slot) or t. Each slot reads only its own expert's rows, so a decode step reads the
// active experts' bytes only. One weight type per variant (WTYPE_*, dequant.glsl's generic dequant4 / dequant1).
//
// Work split (matvec.comp's): workgroup (x, y) = (group of ROWS output rows, slot y); WG invocations walk the row in
// groups of 4 elements with a stride of 4 * WG, one partial sum per row, reduced with subgroupAdd and then across
// subgroups in shared memory. Row groups are a grid-stride loop.
// The weight may be split over several buffers at whole rows (memory.h: SplitBuffer): one dispatch per chunk binds
// rows [row_begin, row_begin + chunk_rows) and writes only the outputs whose weight row it holds.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 2;  // <= 4
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) readonly buffer Experts { int experts[]; };
layout(binding = 3) writeonly buffer Y { float y[]; };
layout(binding = 4) readonly buffer Bias { float bias[]; };  // [n_experts, out_features] when has_bias
layout(push_constant) uniform Push {
  uint row_bytes; uint row_begin; uint chunk_rows; uint cols; uint out_features; uint k; uint per_slot;
  uint has_bias;
} pc;
#include "dequant.glsl"

const uint MAX_ROWS = 4;
const uint MAX_SUBGROUPS = 64;
shared float partial[MAX_ROWS * MAX_SUBGROUPS];

// Named accumulators (see matvec.comp): row r of the group is local weight row lrow##r, valid when in the chunk.
#define ROW_ADD(r, value) if (r < ROWS && ok##r) acc##r += value;
#define ROW_REDUCE(r)                                                      \
  if (r < ROWS) {                                                          \
    const float v = subgroupAdd(acc##r);                                   \
    if (subgroupElect()) partial[r * MAX_SUBGROUPS + gl_SubgroupID] = v;   \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint slot = gl_WorkGroupID.y;
  const uint e = uint(experts[slot]);
  const uint x_base = (pc.per_slot != 0 ? slot : slot / pc.k) * pc.cols;
  const uint cols4 = pc.cols & ~3u;
  const uint row_groups = (pc.out_features + ROWS - 1) / ROWS;
  for (uint rg = gl_WorkGroupID.x; rg < row_groups; rg += gl_NumWorkGroups.x) {
    const uint row0 = rg * ROWS;
    // The group's rows as rows of this chunk (wrapping to huge values below row_begin).
    const uint lrow0 = e * pc.out_features + row0 - pc.row_begin;
    const uint lrow1 = lrow0 + 1, lrow2 = lrow0 + 2, lrow3 = lrow0 + 3;
    const bool ok0 = row0 < pc.out_features && lrow0 < pc.chunk_rows;
    const bool ok1 = row0 + 1 < pc.out_features && lrow1 < pc.chunk_rows;
    const bool ok2 = row0 + 2 < pc.out_features && lrow2 < pc.chunk_rows;
    const bool ok3 = row0 + 3 < pc.out_features && lrow3 < pc.chunk_rows;
    float acc0 = 0.0, acc1 = 0.0, acc2 = 0.0, acc3 = 0.0;
    for (uint c = tid * 4; c < cols4; c += wg * 4) {
      const vec4 xv = vec4(x[x_base + c], x[x_base + c + 1], x[x_base + c + 2], x[x_base + c + 3]);
      ROW_ADD(0, dot(dequant4(lrow0 * pc.row_bytes, c), xv))
      ROW_ADD(1, dot(dequant4(lrow1 * pc.row_bytes, c), xv))
      ROW_ADD(2, dot(dequant4(lrow2 * pc.row_bytes, c), xv))
      ROW_ADD(3, dot(dequant4(lrow3 * pc.row_bytes, c), xv))
    }
    for (uint c = cols4 + tid; c < pc.cols; c += wg) {  // tails exist only for f32/f16/bf16 rows
      const float xe = x[x_base + c];
      ROW_ADD(0, dequant1(lrow0 * pc.row_bytes, c) * xe) ROW_ADD(1, dequant1(lrow1 * pc.row_bytes, c) * xe)
      ROW_ADD(2, dequant1(lrow2 * pc.row_bytes, c) * xe) ROW_ADD(3, dequant1(lrow3 * pc.row_bytes, c) * xe)
    }
    ROW_REDUCE(0) ROW_REDUCE(1) ROW_REDUCE(2) ROW_REDUCE(3)
    barrier();
    const bool ok = tid == 0 ? ok0 : tid == 1 ? ok1 : tid == 2 ? ok2 : ok3;
    if (tid < ROWS && ok) {
      float s = 0.0;
      for (uint i = 0; i < gl_NumSubgroups; ++i) s += partial[tid * MAX_SUBGROUPS + i];
      const uint r = row0 + tid;
      if (pc.has_bias != 0) s += bias[e * pc.out_features + r];
      y[slot * pc.out_features + r] = s;
    }
    barrier();  // partial[] is reused by the next row group
  }
}
