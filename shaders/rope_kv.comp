#version 450
// Decode's RoPE and KV-cache append in one dispatch (the backend fuses rope_q, rope_k, k_cache and v_cache:
// src/vk/backend/fusion.h). For every token t < n_tokens, at position p = positions[t] and cache row c = rows[t]
// (the step's KvRows: the paged cache, engine/plan.h):
//   q[t]   rotated in place (n_heads heads), as rope.comp does;
//   k[t]   rotated in place (n_kv_heads heads) and the rotated row written to k_cache[c];
//   v[t]   copied to v_cache[c] (v_width floats; 0 when the plan has no V write to fuse).
// The caches are f32, or f16 with CACHE_F16 (converted as kv_write.comp does; 16-bit storage only).
// Work items per token, in this order (grid-stride loop over n_tokens * items_per_token):
//   n_heads * half          one pair of a q head each (half = rope_dims / 2)
//   n_kv_heads * (head_dim - half)   per k head: `half` pairs, then the head_dim - rope_dims dims past the rotary
//                           part (partial rotary), copied to the cache unchanged
//   v_width                 one V element each
// The pairs are (2i, 2i + 1) when ADJACENT (llama) or (i, i + half) (NEOX halves: qwen2/3); theta and the rotation are
// rope.glsl's, so q and k get exactly the bits rope.comp gives them.
// Split-K partials (OpEncoder::take_split_sum; the host hands them over only when rope_dims == head_dim, so the items
// above touch every element of q): q, k and v may be split GEMMs' outputs whose partials (bindings 8, 9 and 10, at
// strides of pc.q_stride / pc.k_stride / pc.v_stride floats) were not yet added. Every element read is x[i] + part[0][i]
// + ... in split order, as add_splits.comp adds them, and the sums are written back (rotated for q and k, as without
// partials; K's past-rotary dims and V as they are).
#extension GL_GOOGLE_include_directive : require
#ifdef CACHE_F16
#extension GL_EXT_shader_16bit_storage : require
#define CACHE_T float16_t
#else
#define CACHE_T float
#endif
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ADJACENT = 1;
layout(binding = 0) buffer Q { float q[]; };
layout(binding = 1) buffer K { float k[]; };
layout(binding = 2) buffer V { float v[]; };
layout(binding = 3) writeonly buffer KCache { CACHE_T k_cache[]; };
layout(binding = 4) writeonly buffer VCache { CACHE_T v_cache[]; };
layout(binding = 5) readonly buffer Positions { int positions[]; };
layout(binding = 6) readonly buffer InvFreq { float inv_freq[]; };
layout(binding = 7) readonly buffer Rows { int rows[]; };
layout(binding = 8) readonly buffer QPart { float q_part[]; };  // bound to q, k and v again without partials
layout(binding = 9) readonly buffer KPart { float k_part[]; };
layout(binding = 10) readonly buffer VPart { float v_part[]; };
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint rope_dims; uint v_width;
  uint q_parts; uint q_stride; uint k_parts; uint k_stride; uint v_parts; uint v_stride;
} pc;

// Element i of q, k and v with its partials added.
float q_at(uint i) {
  float x = q[i];
  for (uint z = 0; z < pc.q_parts; ++z) x += q_part[z * pc.q_stride + i];
  return x;
}
float k_at(uint i) {
  float x = k[i];
  for (uint z = 0; z < pc.k_parts; ++z) x += k_part[z * pc.k_stride + i];
  return x;
}
float v_at(uint i) {
  float x = v[i];
  for (uint z = 0; z < pc.v_parts; ++z) x += v_part[z * pc.v_stride + i];
  return x;
}

#include "rope.glsl"

// Element indices (within a head) of pair i.
uvec2 pair_of(uint i, uint half_dims) { return ADJACENT != 0 ? uvec2(2 * i, 2 * i + 1) : uvec2(i, i + half_dims); }

void main() {
  const uint half_dims = pc.rope_dims / 2;
  const uint q_items = pc.n_heads * half_dims;
  const uint k_per_head = pc.head_dim - half_dims;
  const uint k_items = pc.n_kv_heads * k_per_head;
  const uint per_token = q_items + k_items + pc.v_width;
  const uint k_width = pc.n_kv_heads * pc.head_dim;
  const uint count = pc.n_tokens * per_token;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint item = gl_GlobalInvocationID.x; item < count; item += stride) {
    const uint t = item / per_token;
    uint r = item - t * per_token;
    const int p = positions[t];
    if (r < q_items) {
      const uint h = r / half_dims, i = r - h * half_dims;
      const uvec2 e = (t * pc.n_heads + h) * pc.head_dim + pair_of(i, half_dims);
      const vec2 rot = rope_rotate(q_at(e.x), q_at(e.y), p, inv_freq[i], inv_freq[half_dims]);
      q[e.x] = rot.x;
      q[e.y] = rot.y;
      continue;
    }
    r -= q_items;
    if (r < k_items) {
      const uint h = r / k_per_head, i = r - h * k_per_head;
      const uint head = h * pc.head_dim;  // within the token's row
      const uint src = t * k_width, dst = uint(rows[t]) * k_width;
      if (i < half_dims) {
        const uvec2 e = head + pair_of(i, half_dims);
        const vec2 rot = rope_rotate(k_at(src + e.x), k_at(src + e.y), p, inv_freq[i], inv_freq[half_dims]);
        k[src + e.x] = rot.x;
        k[src + e.y] = rot.y;
        k_cache[dst + e.x] = CACHE_T(rot.x);
        k_cache[dst + e.y] = CACHE_T(rot.y);
      } else {
        const uint e = head + pc.rope_dims + (i - half_dims);
        const float x = k_at(src + e);
        if (pc.k_parts > 0u) k[src + e] = x;
        k_cache[dst + e] = CACHE_T(x);
      }
      continue;
    }
    r -= k_items;
    const float x = v_at(t * pc.v_width + r);
    if (pc.v_parts > 0u) v[t * pc.v_width + r] = x;
    v_cache[uint(rows[t]) * pc.v_width + r] = CACHE_T(x);
  }
}
