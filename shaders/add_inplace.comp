#version 450
// Residual add, in place: x[i] += y[i] for i < count. Grid-stride loop; workgroup size = spec constant 0.
layout(local_size_x_id = 0) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer Y { float y[]; };
layout(push_constant) uniform Push { uint count; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) x[i] += y[i];
}
