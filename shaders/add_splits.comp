#version 450
// A split-K GEMM's reduction (op_matmul.cpp): y[i] += part[0 * stride + i] + part[1 * stride + i] + ... for the
// splits - 1 partials of matmul_coopmat.comp / matmul_tiled.comp (split 0 wrote y itself), added one at a time in
// split order, so the sum rounds as a chain of in-place adds would. Grid-stride loop; workgroup = spec constant 0.
layout(local_size_x_id = 0) in;
layout(binding = 0) buffer Y { float y[]; };
layout(binding = 1) readonly buffer Part { float part[]; };
layout(push_constant) uniform Push { uint count; uint partials; uint stride; } pc;
void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += step) {
    float v = y[i];
    for (uint z = 0; z < pc.partials; ++z) v += part[z * pc.stride + i];
    y[i] = v;
  }
}
