#version 450
// Bias add, in place: x[r, c] += bias[c] for a [rows, width] matrix (qwen2's Q/K/V biases). Grid-stride loop.
layout(local_size_x_id = 0) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform Push { uint count; uint width; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) x[i] += bias[i % pc.width];
}
