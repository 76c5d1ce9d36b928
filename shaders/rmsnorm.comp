#version 450
// RMSNorm: out[r, :] = in[in_row_offset + r, :] / sqrt(mean(in row^2) + eps) * weight, for r < rows.
// One workgroup per row (grid-stride over rows); the sum of squares is reduced through shared memory, so any
// workgroup size (spec constant 0, a power of two) works on any subgroup size. `in` and `out` may be the same buffer
// (each thread reads its elements before the barrier that precedes every write).
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer In { float x[]; };
layout(binding = 1) readonly buffer Weight { float w[]; };
layout(binding = 2) buffer Out { float y[]; };
layout(push_constant) uniform Push { uint in_row_offset; uint rows; uint width; float eps; } pc;

shared float partial[gl_WorkGroupSize.x];

void main() {
  const uint tid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
  for (uint row = gl_WorkGroupID.x; row < pc.rows; row += gl_NumWorkGroups.x) {
    const uint base = (pc.in_row_offset + row) * pc.width;
    float sum = 0.0;
    for (uint i = tid; i < pc.width; i += n) sum += x[base + i] * x[base + i];
    partial[tid] = sum;
    barrier();
    for (uint s = n / 2; s > 0; s >>= 1) {
      if (tid < s) partial[tid] += partial[tid + s];
      barrier();
    }
    const float scale = inversesqrt(partial[0] / float(pc.width) + pc.eps);
    const uint out_base = row * pc.width;
    for (uint i = tid; i < pc.width; i += n) y[out_base + i] = x[base + i] * scale * w[i];
    barrier();  // partial[0] is read above before the next row overwrites it
  }
}
