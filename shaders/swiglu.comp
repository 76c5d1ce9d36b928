#version 450
// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). Grid-stride loop. `out` may alias `gate`.
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Gate { float gate[]; };
layout(binding = 1) readonly buffer Up { float up[]; };
layout(binding = 2) writeonly buffer Out { float y[]; };
layout(push_constant) uniform Push { uint count; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) {
    const float g = gate[i];
    y[i] = g / (1.0 + exp(-g)) * up[i];
  }
}
