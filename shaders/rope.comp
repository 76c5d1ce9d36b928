#version 450
// Rotary position embedding, in place, on x = [n_tokens, n_heads, head_dim]. One invocation per (token, head, pair
// i < rope_dims / 2); grid-stride loop. theta = positions[t] * inv_freq[i], where the host computed
// inv_freq[i] = freq_scale * base^(-2i / rope_dims) / freq_factor[i] in double precision. The pair is
// (x[2i], x[2i+1]) when ADJACENT (spec constant 1 = 1: llama) or (x[i], x[i + rope_dims/2]) (NEOX halves: qwen2/3).
// The angle is reduced to [-pi, pi] before cos/sin (Vulkan only bounds their error there). inv_freq[half_dims] is
// the magnitude factor (YaRN, attn_factor; rope.glsl).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ADJACENT = 1;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) readonly buffer Positions { int positions[]; };
layout(binding = 2) readonly buffer InvFreq { float inv_freq[]; };
layout(push_constant) uniform Push { uint n_tokens; uint n_heads; uint head_dim; uint rope_dims; } pc;

#include "rope.glsl"

void main() {
  const uint half_dims = pc.rope_dims / 2;
  const uint count = pc.n_tokens * pc.n_heads * half_dims;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint item = gl_GlobalInvocationID.x; item < count; item += stride) {
    const uint i = item % half_dims;
    const uint th = item / half_dims;  // token * n_heads + head
    const uint t = th / pc.n_heads;
    const uint base = th * pc.head_dim;
    const uint ia = ADJACENT != 0 ? base + 2 * i : base + i;
    const uint ib = ADJACENT != 0 ? ia + 1 : ia + half_dims;
    const vec2 r = rope_rotate(x[ia], x[ib], positions[t], inv_freq[i], inv_freq[half_dims]);
    x[ia] = r.x;
    x[ib] = r.y;
  }
}
