#version 450
// Mixture-of-experts output (engine::MoeCombineOp): out[t, i] = sum over s = 0..k-1, in slot order, of
// weights[t, s] * in[t, s, i] (f32). One invocation per output element, grid-stride. ACCUMULATE (spec constant 1):
// out += that sum instead (the residual add that consumed it, fused by fusion.cpp).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool ACCUMULATE = false;
layout(binding = 0) readonly buffer In { float x[]; };             // [n_tokens, k, width]
layout(binding = 1) readonly buffer Weights { float weights[]; };  // [n_tokens, k]
layout(binding = 2) buffer Out { float y[]; };                     // [n_tokens, width]
layout(push_constant) uniform Push { uint n_tokens; uint k; uint width; } pc;

void main() {
  const uint count = pc.n_tokens * pc.width;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint item = gl_GlobalInvocationID.x; item < count; item += stride) {
    const uint t = item / pc.width, i = item - t * pc.width;
    float acc = 0.0;
    for (uint s = 0; s < pc.k; ++s) acc += weights[t * pc.k + s] * x[(t * pc.k + s) * pc.width + i];
    y[item] = ACCUMULATE ? y[item] + acc : acc;
  }
}
