#version 450
// f32 -> f16 (round to nearest even, as packHalf2x16), 4 values per invocation, grid-stride: the prefill GEMM's
// activations are converted once per input buffer instead of once per weight-column tile (op_matmul.cpp).
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer X { vec4 x4[]; };
layout(binding = 1) writeonly buffer Y { uvec2 y[]; };  // 4 halves
layout(push_constant) uniform Push { uint count4; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count4; i += stride) {
    const vec4 v = x4[i];
    y[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  }
}
