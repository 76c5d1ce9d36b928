#version 450
// Gated linear units (engine::GluOp), elementwise: out[i] = act(gate[i]) * up[i], the activation chosen by KIND
// (spec constant 1, engine::GluKind's order):
//   0 SiLU       silu(g) * u, silu(g) = g / (1 + exp(-g))                                    (llama, qwen, phi3)
//   1 GeluTanh   0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))) * u                         (gemma3)
//   2 SwiGluOai  x = min(g, limit), y = clamp(u, -limit, limit): x / (1 + exp(-alpha x)) * (y + 1)   (gpt-oss)
// tanh is evaluated as sign(z) (1 - e^(-2|z|)) / (1 + e^(-2|z|)), which cannot overflow for large |z|.
// Grid-stride loop. `out` may alias `gate`.
// F16_OUT (spec constant 2, count % 4 == 0): 4 elements per invocation, also written as f16 (round to nearest even,
// as convert_f16.comp) into binding 3: the cooperative-matrix GEMM that reads the product (the down projection) takes
// that copy and needs no conversion dispatch of its own (OpEncoder::f16_target). Its reads are vec4: a batched
// step's GLU adds four partials each to gate and up, ten reads per element, which as 4-byte loads (each warp load
// touching a quarter of every 16 bytes it spans) made it cost twice the plain GLU. The GEMMs' partial strides are
// whole vec4 (multiples of 64 floats; the host checks).
// WITH_Q8_OUT (the glu_f32_q8 variant: subgroup shuffles; rows of pc.cols % 32 == 0 elements, workgroups of whole
// subgroups of at least 8): the vec4 path also writes the product as int8 per 32 elements into binding 6 in
// quantize_q8.comp's layout
// (q8_rows.glsl), the input of the int8 GEMM that reads it (matmul_coopmat_q8.comp; OpEncoder::q8_target).
// Split-K partials (OpEncoder::take_split_sum): gate (pc.gate_parts > 0) and up (pc.up_parts > 0) may be split GEMMs'
// outputs whose partials (bindings 4 and 5, at strides of pc.gate_stride / pc.up_stride floats) were not yet added:
// each element read is gate[i] + part[0][i] + ... in split order, as add_splits.comp adds them, and the sums are
// written back (each only when pc.keep_gate / pc.keep_up: `out` may alias either).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const bool F16_OUT = false;
layout(binding = 0) buffer Gate { float gate[]; };
layout(binding = 0) buffer Gate4 { vec4 gate4[]; };
layout(binding = 1) buffer Up { float up[]; };
layout(binding = 1) buffer Up4 { vec4 up4[]; };
layout(binding = 2) writeonly buffer Out { float y[]; };
layout(binding = 2) writeonly buffer Out4 { vec4 y4[]; };
layout(binding = 3) writeonly buffer OutF16 { uvec2 h[]; };  // 4 halves; bound to `out` again without F16_OUT
layout(binding = 4) readonly buffer GatePart { float gate_part[]; };  // bound to gate again without partials
layout(binding = 4) readonly buffer GatePart4 { vec4 gate_part4[]; };
layout(binding = 5) readonly buffer UpPart { float up_part[]; };      // bound to up again without partials
layout(binding = 5) readonly buffer UpPart4 { vec4 up_part4[]; };
layout(push_constant) uniform Push {
  uint count; float alpha; float limit; uint gate_parts; uint gate_stride; uint up_parts; uint up_stride;
  uint keep_gate; uint keep_up; uint cols;  // cols: the row width, for Q8_OUT
} pc;

#extension GL_GOOGLE_include_directive : require
#include "glu.glsl"
#if defined(WITH_Q8_OUT)
#extension GL_KHR_shader_subgroup_shuffle : require
#define Q8_FROM_LANES
#include "q8_rows.glsl"
layout(binding = 6) writeonly buffer Q8 { uint q8[]; };
const bool Q8_OUT = true;
#else
const bool Q8_OUT = false;
#endif

float act(float g, float u) {
  if (KIND == 1u) {
    const float z = 0.7978845608028654 * g * (1.0 + 0.044715 * g * g);
    const float e = exp(-2.0 * abs(z));
    const float th = sign(z) * (1.0 - e) / (1.0 + e);
    return 0.5 * g * (1.0 + th) * u;
  }
  if (KIND == 2u) return glu_oai(g, u, pc.alpha, pc.limit);
  return glu_silu(g, u);
}

// act(gate[i], up[i]) with the inputs' partials added (and their sums written back).
float unit(uint i) {
  float g = gate[i], u = up[i];
  if (pc.gate_parts > 0u) {
    for (uint z = 0; z < pc.gate_parts; ++z) g += gate_part[z * pc.gate_stride + i];
    if (pc.keep_gate != 0u) gate[i] = g;
  }
  if (pc.up_parts > 0u) {
    for (uint z = 0; z < pc.up_parts; ++z) u += up_part[z * pc.up_stride + i];
    if (pc.keep_up != 0u) up[i] = u;
  }
  return act(g, u);
}

// unit() of elements 4 i .. 4 i + 3 with vec4 reads and writes.
vec4 unit4(uint i) {
  vec4 g = gate4[i], u = up4[i];
  if (pc.gate_parts > 0u) {
    for (uint z = 0; z < pc.gate_parts; ++z) g += gate_part4[z * (pc.gate_stride / 4u) + i];
    if (pc.keep_gate != 0u) gate4[i] = g;
  }
  if (pc.up_parts > 0u) {
    for (uint z = 0; z < pc.up_parts; ++z) u += up_part4[z * (pc.up_stride / 4u) + i];
    if (pc.keep_up != 0u) up4[i] = u;
  }
  return vec4(act(g.x, u.x), act(g.y, u.y), act(g.z, u.z), act(g.w, u.w));
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (F16_OUT || Q8_OUT) {
    for (uint i = gl_GlobalInvocationID.x; i < pc.count / 4u; i += stride) {
      const vec4 v = unit4(i);
      y4[i] = v;
      if (F16_OUT) h[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
#if defined(WITH_Q8_OUT)
      {
        const uint row = i / (pc.cols / 4u), g = i % (pc.cols / 4u), q_base = q8_row_base(row, pc.cols);
        const float m = q8_block_max8(v);
        q8[q_base + g] = q8_pack(v, m);
        if ((g & 7u) == 0u) q8[q_base + q8_scale_word(pc.cols, g)] = q8_scale_bits(m);
      }
#endif
    }
    return;
  }
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) y[i] = unit(i);
}
