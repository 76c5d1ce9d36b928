#version 450
// Decode's per-head Q/K RMSNorm, RoPE and KV-cache append in one dispatch: rope_kv.comp with the attn_q_norm and
// attn_k_norm ops before it folded in (the backend's fusions, src/vk/backend/fusion.h; qwen3, qwen3moe and gemma3
// normalize every head of q and k before rotating it). For token t = gl_WorkGroupID.y at position p = positions[t]
// and cache row c = rows[t], workgroup h = gl_WorkGroupID.x does:
//   h < n_heads                    q head h: x * (1 / sqrt(mean(x^2) + eps)) * q_norm, rotated in place
//   h < n_heads + n_kv_heads       k head h - n_heads: normalized with k_norm, rotated in place, and written to
//                                  k_cache[c] (the dims past rope_dims normalized and copied unrotated)
//   the rest                       V: WG elements of v[t] each, copied to v_cache[c] (v_width floats; none without a
//                                  fused V write)
// Each head is one workgroup of WG invocations (spec constant 0): the sum of squares is reduced per subgroup, then
// across them in shared memory; each invocation then owns pairs i = tid, tid + WG, ... of the head. The scale and the
// rotation are rmsnorm.comp's and rope.glsl's, so q and k get the unfused kernels' values up to f32 rounding.
// The caches are f32, or f16 with CACHE_F16.
// Split-K partials (OpEncoder::take_split_sum): q, k and v may be split GEMMs' outputs whose partials (bindings 10, 11
// and 12, at strides of pc.q_stride / pc.k_stride / pc.v_stride floats) were not yet added. The norm's pass adds them
// in split order, as add_splits.comp would, and writes the sums back before the workgroup's barrier, so the rotation's
// pass (other invocations per element) reads them; V is summed where it is copied, and written back too.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
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
layout(binding = 8) readonly buffer QNorm { float q_norm[]; };  // [head_dim]
layout(binding = 9) readonly buffer KNorm { float k_norm[]; };  // [head_dim]
layout(binding = 10) readonly buffer QPart { float q_part[]; };  // bound to q, k and v again without partials
layout(binding = 11) readonly buffer KPart { float k_part[]; };
layout(binding = 12) readonly buffer VPart { float v_part[]; };
layout(push_constant) uniform Push {
  uint n_heads; uint n_kv_heads; uint head_dim; uint rope_dims; uint v_width; float q_eps; float k_eps;
  uint q_parts; uint q_stride; uint k_parts; uint k_stride; uint v_parts; uint v_stride;
} pc;

#include "rope.glsl"

const uint WG = gl_WorkGroupSize.x;
shared float red[64];  // one sum of squares per subgroup (WG <= 64 x the subgroup size)

// Element indices (within a head) of pair i.
uvec2 pair_of(uint i, uint half_dims) { return ADJACENT != 0 ? uvec2(2 * i, 2 * i + 1) : uvec2(i, i + half_dims); }

void main() {
  const uint tid = gl_LocalInvocationID.x, t = gl_WorkGroupID.y, h = gl_WorkGroupID.x;
  const uint heads = pc.n_heads + pc.n_kv_heads;
  const uint kv_width = pc.n_kv_heads * pc.head_dim, dst = uint(rows[t]) * kv_width;
  if (h >= heads) {  // V (uniform per workgroup: the barriers below are never reached here)
    const uint e = (h - heads) * WG + tid, at = t * pc.v_width + e;
    if (e < pc.v_width) {
      float x = v[at];
      if (pc.v_parts > 0u) {
        for (uint z = 0; z < pc.v_parts; ++z) x += v_part[z * pc.v_stride + at];
        v[at] = x;
      }
      v_cache[uint(rows[t]) * pc.v_width + e] = CACHE_T(x);
    }
    return;
  }
  const bool is_q = h < pc.n_heads;
  const uint base = is_q ? (t * pc.n_heads + h) * pc.head_dim : t * kv_width + (h - pc.n_heads) * pc.head_dim;
  const uint cache_base = dst + (is_q ? 0u : (h - pc.n_heads) * pc.head_dim);

  const uint parts = is_q ? pc.q_parts : pc.k_parts, stride = is_q ? pc.q_stride : pc.k_stride;
  float ss = 0.0;
  for (uint e = tid; e < pc.head_dim; e += WG) {
    float x = is_q ? q[base + e] : k[base + e];
    if (parts > 0u) {
      for (uint z = 0; z < parts; ++z) x += is_q ? q_part[z * stride + base + e] : k_part[z * stride + base + e];
      if (is_q) q[base + e] = x;
      else k[base + e] = x;
    }
    ss += x * x;
  }
  ss = subgroupAdd(ss);
  if (subgroupElect()) red[gl_SubgroupID] = ss;
  memoryBarrierBuffer();  // the sums written back are read by other invocations below
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
  const float scale = inversesqrt(total / float(pc.head_dim) + (is_q ? pc.q_eps : pc.k_eps));

  const int p = positions[t];
  const uint half_dims = pc.rope_dims / 2;
  for (uint i = tid; i < half_dims; i += WG) {
    const uvec2 e = pair_of(i, half_dims);
    if (is_q) {
      const vec2 rot = rope_rotate(q[base + e.x] * scale * q_norm[e.x], q[base + e.y] * scale * q_norm[e.y], p,
                                   inv_freq[i], inv_freq[half_dims]);
      q[base + e.x] = rot.x;
      q[base + e.y] = rot.y;
    } else {
      const vec2 rot = rope_rotate(k[base + e.x] * scale * k_norm[e.x], k[base + e.y] * scale * k_norm[e.y], p,
                                   inv_freq[i], inv_freq[half_dims]);
      k[base + e.x] = rot.x;
      k[base + e.y] = rot.y;
      k_cache[cache_base + e.x] = CACHE_T(rot.x);
      k_cache[cache_base + e.y] = CACHE_T(rot.y);
    }
  }
  // Partial rotary: the dims past rope_dims are normalized, not rotated.
  for (uint e = pc.rope_dims + tid; e < pc.head_dim; e += WG) {
    if (is_q) {
      q[base + e] = q[base + e] * scale * q_norm[e];
    } else {
      const float y = k[base + e] * scale * k_norm[e];
      k[base + e] = y;
      k_cache[cache_base + e] = CACHE_T(y);
    }
  }
}
