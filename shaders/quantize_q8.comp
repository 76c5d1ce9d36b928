#version 450
// Activation quantizer for the int8 decode matvecs (matvec_block.comp built with X_Q8): makes the matvec's input
// from x and quantizes it per 32-element block to int8 with one f32 scale,
//   d = max |a| / 127,  code = roundEven(a * 127 / max |a|)  (0 for an all-zero block),  a ~ d * code,
// and writes token row t in the layout of q8_rows.glsl (cols / 4 code words, then cols / 32 scales).
// The input a (spec constant 1, INPUT; the same modes as the matvec kernels' fused inputs):
//   IN_PLAIN    a = x row x_row0 + t
//   IN_RMSNORM  a = x row * (1 / sqrt(mean(x row^2) + eps)) * aux (the norm weight): the rmsnorm op itself
//   IN_SWIGLU   a = silu(x row) * aux row (gate, up)
//   IN_SWIGLU_OAI  a = gpt-oss's clamped SwiGLU of them (glu.glsl; alpha and limit: spec constants 2 and 3)
// Workgroups: x over token rows, y over chunks of a row (grid-stride in both); WG invocations (spec constant 0, a power
// of two >= 8) each take one 4-element group per step of WG groups, chunk y the steps y, y + groups in y, ... A
// decode step quantizes 1-4 rows, so the chunks put a row's steps on several multiprocessors side by side instead of
// one workgroup walking them in turn (this kernel is a stage of its own between a layer's matmuls). With IN_RMSNORM
// every chunk first adds up the whole row's squares (reads of the row, which is in cache), reduced per subgroup, then
// across them in shared memory. A block's 8 groups meet for the block maximum by subgroup shuffles (LANES, spec
// constant 4: workgroups of whole subgroups of at least 8, so a block's 8 invocations are in one; the host's
// OpEncoder::q8_lanes), else in shared memory at two barriers a step. cols % 32 == 0.
// COMBINE (quantize_q8_combine, with IN_RMSNORM, x_row0 0): first the MoE combine that adds into the residual stream,
// as moe_combine.comp with ACCUMULATE does, x[t] += sum over s < k, in slot order, of weights[t, s] * down[t, s];
// then the next layer's norm of the new row, quantized: a decode step's last dispatch of one layer and the first of
// the next (the backend's fusions, src/vk/backend/fusion.h). Each invocation reads back only the groups it wrote, so
// a row is one chunk (the host dispatches one workgroup in y).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
layout(local_size_x_id = 0) in;
const uint IN_PLAIN = 0, IN_RMSNORM = 1, IN_SWIGLU = 2, IN_SWIGLU_OAI = 3;
layout(constant_id = 1) const uint INPUT = IN_PLAIN;
layout(constant_id = 2) const float GLU_ALPHA = 1.702;  // IN_SWIGLU_OAI
layout(constant_id = 3) const float GLU_LIMIT = 7.0;
layout(constant_id = 4) const bool LANES = false;  // block maxima by subgroup shuffles (see the top)
#if defined(COMBINE)
layout(binding = 0) buffer X { vec4 x4[]; };
layout(binding = 3) readonly buffer Down { vec4 down4[]; };        // [rows, k, cols]
layout(binding = 4) readonly buffer Weights { float weights[]; };  // [rows, k]
layout(push_constant) uniform Push { uint cols; uint rows; uint x_row0; float eps; uint k; } pc;
#else
layout(binding = 0) readonly buffer X { vec4 x4[]; };
layout(push_constant) uniform Push { uint cols; uint rows; uint x_row0; float eps; } pc;
#endif
layout(binding = 1) readonly buffer Aux { vec4 aux4[]; };  // IN_RMSNORM: norm weight [cols]; IN_SWIGLU: up; else x
layout(binding = 2) writeonly buffer Q { uint q[]; };

#include "glu.glsl"
#define Q8_FROM_LANES
#include "q8_rows.glsl"

const uint WG = gl_WorkGroupSize.x;
shared float red[WG];  // IN_RMSNORM: the sum of squares; then each group's max |a|

vec4 input_group(uint x4_base, uint g, float norm_scale) {
  const vec4 v = x4[x4_base + g];
  if (INPUT == IN_RMSNORM) return v * norm_scale * aux4[g];
  if (INPUT == IN_SWIGLU) return glu_silu(v, aux4[x4_base + g]);
  if (INPUT == IN_SWIGLU_OAI) return glu_oai(v, aux4[x4_base + g], GLU_ALPHA, GLU_LIMIT);
  return v;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, groups = pc.cols >> 2;
  for (uint row = gl_WorkGroupID.x; row < pc.rows; row += gl_NumWorkGroups.x) {
    const uint x4_base = (pc.x_row0 + row) * groups, q_base = q8_row_base(row, pc.cols);
    float norm_scale = 1.0;
    if (INPUT == IN_RMSNORM) {
      float ss = 0.0;
      for (uint g = tid; g < groups; g += WG) {
#if defined(COMBINE)
        vec4 acc = vec4(0.0);
        for (uint s = 0; s < pc.k; ++s) acc += weights[row * pc.k + s] * down4[(row * pc.k + s) * groups + g];
        x4[x4_base + g] = x4[x4_base + g] + acc;
#endif
        const vec4 v = x4[x4_base + g];
        ss += dot(v, v);
      }
      // Subgroup sums, then every invocation adds the (at most WG / subgroup size) of them: two barriers, where a
      // shared-memory tree over 1024 invocations took ten (this kernel sits between two decode stages).
      ss = subgroupAdd(ss);
      if (subgroupElect()) red[gl_SubgroupID] = ss;
      barrier();
      float total = 0.0;
      for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
      norm_scale = inversesqrt(total / float(pc.cols) + pc.eps);
      barrier();  // red is read above before the groups below overwrite it
    }
    // Steps of WG groups: WG and groups are multiples of 8, so a block never straddles two steps (and its 8
    // invocations are all in the row or all past it).
    for (uint base = gl_WorkGroupID.y * WG; base < groups; base += gl_NumWorkGroups.y * WG) {
      const uint g = base + tid;
      const bool in_row = g < groups;
      const vec4 a = in_row ? input_group(x4_base, g, norm_scale) : vec4(0.0);
      float m = 0.0;
      if (LANES) {
        m = q8_block_max8(a);
      } else {
        const vec4 m4 = abs(a);
        red[tid] = max(max(m4.x, m4.y), max(m4.z, m4.w));
        barrier();
        const uint first = tid & ~7u;
        for (uint k = 0; k < 8u; ++k) m = max(m, red[first + k]);
        barrier();  // red is overwritten by the next step
      }
      if (in_row) {
        q[q_base + g] = q8_pack(a, m);
        if ((g & 7u) == 0u) q[q_base + q8_scale_word(pc.cols, g)] = q8_scale_bits(m);
      }
    }
  }
}
