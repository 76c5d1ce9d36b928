#version 450
// KV-cache append: cache[positions[t], :] = src[t, :] for t < n_tokens, rows of `width` floats. Grid-stride loop.
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Src { float src[]; };
layout(binding = 1) writeonly buffer Cache { float cache[]; };
layout(binding = 2) readonly buffer Positions { int positions[]; };
layout(push_constant) uniform Push { uint n_tokens; uint width; } pc;
void main() {
  const uint count = pc.n_tokens * pc.width;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
    const uint t = i / pc.width, c = i - t * pc.width;
    cache[uint(positions[t]) * pc.width + c] = src[i];
  }
}
