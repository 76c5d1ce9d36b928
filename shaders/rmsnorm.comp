#version 450
// RMSNorm: out[r, :] = in[in_row_offset + r, :] / sqrt(mean(in row^2) + eps) * weight, for r < rows.
// One workgroup per row (grid-stride over rows). Each invocation sums the squares of its elements (whole vec4 when
// width % 4 == 0), the sums are added per subgroup, then every invocation adds the subgroups' sums from shared memory:
// one barrier per row, where a shared-memory tree over the workgroup took log2(size) (8 at 256 invocations). Any
// power-of-two workgroup size (spec constant 0) on any subgroup size. `in` and `out` may be the same buffer (each
// invocation reads its elements before the barrier that precedes every write).
// F16_OUT (spec constant 1, width % 4 == 0): the row is also written as f16 (round to nearest even, as
// convert_f16.comp) into binding 3 at row r: the cooperative-matrix GEMMs that read the norm take that copy and need no
// conversion dispatch of their own (OpEncoder::f16_target).
// Q8_OUT (spec constant 2, width % 32 == 0, workgroups of whole subgroups of at least 8): the row is also written as
// int8 per 32 elements into binding 5 in quantize_q8.comp's layout (q8_rows.glsl), the input of the int8 GEMMs that
// read the norm (matmul_coopmat_q8.comp), which then need no quantizer dispatch (OpEncoder::q8_target).
// Split-K partials (pc.parts > 0; OpEncoder::take_split_sum): `in` is a split GEMM's output whose partials (binding 4,
// pc.parts of them at a stride of pc.part_stride floats) were not yet added: every element read is in[i] + part[0][i] +
// ... in split order, as add_splits.comp adds them, and the sums are written back to `in` (the residual stream that
// later ops read) before the barrier, so the second pass reads them back.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool F16_OUT = false;
layout(constant_id = 2) const bool Q8_OUT = false;
layout(binding = 0) buffer In { float x[]; };
layout(binding = 0) buffer In4 { vec4 x4[]; };
layout(binding = 1) readonly buffer Weight { float w[]; };
layout(binding = 1) readonly buffer Weight4 { vec4 w4[]; };
layout(binding = 2) buffer Out { float y[]; };
layout(binding = 2) buffer Out4 { vec4 y4[]; };
layout(binding = 3) writeonly buffer OutF16 { uvec2 h[]; };  // 4 halves; bound to `out` again without F16_OUT
layout(binding = 4) readonly buffer Part { float part[]; };  // bound to `in` again without partials
layout(binding = 4) readonly buffer Part4 { vec4 part4[]; };
layout(binding = 5) writeonly buffer Q8 { uint q8[]; };  // bound to `out` again without Q8_OUT
layout(push_constant) uniform Push {
  uint in_row_offset; uint rows; uint width; float eps; uint parts; uint part_stride;
} pc;

#define Q8_FROM_LANES
#include "q8_rows.glsl"

shared float subgroup_sums[gl_WorkGroupSize.x];  // one per subgroup (at most as many as invocations)

void main() {
  const uint tid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
  const bool vec = (pc.width & 3u) == 0u;
  const uint width4 = pc.width / 4u;
  for (uint row = gl_WorkGroupID.x; row < pc.rows; row += gl_NumWorkGroups.x) {
    const uint base = (pc.in_row_offset + row) * pc.width, out_base = row * pc.width;
    float sum = 0.0;
    if (vec) {
      for (uint i = tid; i < width4; i += n) {
        vec4 v = x4[base / 4u + i];
        if (pc.parts > 0u) {
          for (uint z = 0; z < pc.parts; ++z) v += part4[(z * pc.part_stride + base) / 4u + i];
          x4[base / 4u + i] = v;
        }
        sum += dot(v, v);
      }
    } else {
      for (uint i = tid; i < pc.width; i += n) {
        float v = x[base + i];
        if (pc.parts > 0u) {
          for (uint z = 0; z < pc.parts; ++z) v += part[z * pc.part_stride + base + i];
          x[base + i] = v;
        }
        sum += v * v;
      }
    }
    sum = subgroupAdd(sum);
    if (subgroupElect()) subgroup_sums[gl_SubgroupID] = sum;
    barrier();
    float total = 0.0;
    for (uint s = 0; s < gl_NumSubgroups; ++s) total += subgroup_sums[s];
    const float scale = inversesqrt(total / float(pc.width) + pc.eps);
    if (vec) {
      for (uint i = tid; i < width4; i += n) {
        const vec4 v = x4[base / 4u + i] * scale * w4[i];
        y4[out_base / 4u + i] = v;
        if (F16_OUT) h[out_base / 4u + i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
        if (Q8_OUT) {
          const float m = q8_block_max8(v);
          const uint q_base = q8_row_base(row, pc.width);
          q8[q_base + i] = q8_pack(v, m);
          if ((i & 7u) == 0u) q8[q_base + q8_scale_word(pc.width, i)] = q8_scale_bits(m);
        }
      }
    } else {
      for (uint i = tid; i < pc.width; i += n) y[out_base + i] = x[base + i] * scale * w[i];
    }
    barrier();  // subgroup_sums is read above before the next row overwrites it
  }
}
