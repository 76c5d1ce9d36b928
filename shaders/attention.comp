#version 450
// Causal attention over the paged KV cache in flash-attention form (online softmax: no [n x n] scores in memory), for
// prefill and decode alike. One workgroup per (token t, query head h) (grid-stride); KV head g = h / (n_heads /
// n_kv_heads) (GQA; MQA when n_kv_heads = 1). Token t belongs to page-table row s = seq[t] and attends to that
// sequence's keys j = 0..positions[t], key j at cache row
//   R(j) = pages[s * pages_per_seq + j / page_size] * page_size + j % page_size        (engine/plan.h)
// The keys are visited in blocks of WG (spec constant 0, a power of two): invocation j scores key j0 + j (and puts
// its cache row in key_row[] for the V pass), the block's max and sum are reduced in shared memory, the running max m
// and denominator l are rescaled by exp(m_old - m_new), and invocation d accumulates output dimensions d, d + WG, ...
// (head_dim_v <= 4 * WG, checked by the host) over the block's keys.
// Layouts: q [n_tokens, n_heads, head_dim], k_cache [cache_rows, n_kv_heads, head_dim], v_cache [cache_rows,
// n_kv_heads, head_dim_v], out [n_tokens, n_heads, head_dim_v]. The caches are f32, or f16 with CACHE_F16 (16-bit
// storage, converted to f32 on load); everything else is f32.
//
// Split keys (decode, where (token, head) pairs alone are too few workgroups to fill a GPU): with split_keys > 0,
// workgroup (x, y) handles keys [y * split_keys, (y + 1) * split_keys) of (token, head) x and writes its unnormalised
// partial result to `partials` [n_tokens * n_heads, n_splits, head_dim_v + 2] = (acc[0..head_dim_v), m, l) instead
// of `out`; attention_combine.comp merges the splits (a split past the token's position writes m = -inf, l = 0).
// Sliding window (window > 0): token t sees keys j with positions[t] - j < window only; the key loop (or the split's
// range) starts at the window's first key, so the keys before it cost nothing. Sinks (has_sinks, binding 8: one f32
// logit per query head): the softmax state starts as (m, l) = (sinks[h], 1) with acc = 0 -- a virtual key of score
// sinks[h] and value 0 -- in split 0 only, so attention_combine.comp counts it exactly once.
// With CACHE_Q8 they are Q8_0 (engine/kv_q8.h): flat arrays of blocks of 32 elements, 9 words each (words 0..7 the
// int8 values, element 4w + b of the block in byte b of word w; word 8 the f32 scale), so element e of a cache is
// byte e % 4 of word (e / 32) * 9 + (e % 32) / 4, times the scale word (e / 32) * 9 + 8 (CACHE_AT).
#if defined(CACHE_Q8)
#define CACHE_T uint
#define CACHE_AT(c, e)                          \
  (uintBitsToFloat(c[(e) / 32u * 9u + 8u]) *    \
   float(bitfieldExtract(int(c[(e) / 32u * 9u + (e) % 32u / 4u]), int((e) % 4u) * 8, 8)))
#elif defined(CACHE_F16)
#extension GL_EXT_shader_16bit_storage : require
#define CACHE_T float16_t
#define CACHE_AT(c, e) float(c[e])
#else
#define CACHE_T float
#define CACHE_AT(c, e) float(c[e])
#endif
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 1) readonly buffer K { CACHE_T k_cache[]; };
layout(binding = 2) readonly buffer V { CACHE_T v_cache[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) writeonly buffer Out { float o[]; };
layout(binding = 5) writeonly buffer Partials { float partials[]; };
layout(binding = 6) readonly buffer Seq { int seq[]; };
layout(binding = 7) readonly buffer Pages { int pages[]; };
layout(binding = 8) readonly buffer Sinks { float sinks[]; };  // [n_heads] when has_sinks, else a stand-in
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint head_dim_v; float scale; uint split_keys;
  uint page_size; uint pages_per_seq; uint window; uint has_sinks;
} pc;

const uint MAX_HEAD_DIM = 512;
const uint DIMS_PER_INVOCATION = 4;
shared float qs[MAX_HEAD_DIM];
shared float probs[gl_WorkGroupSize.x];
shared float red[gl_WorkGroupSize.x];
shared uint key_row[gl_WorkGroupSize.x];  // the cache row of key j0 + j (set with its score, read by the V pass)

float reduce_max(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = max(red[tid], red[tid + s]);
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

float reduce_sum(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint group = pc.n_heads / pc.n_kv_heads;
  const uint k_stride = pc.n_kv_heads * pc.head_dim, v_stride = pc.n_kv_heads * pc.head_dim_v;
  for (uint th = gl_WorkGroupID.x; th < pc.n_tokens * pc.n_heads; th += gl_NumWorkGroups.x) {
    const uint t = th / pc.n_heads, h = th - t * pc.n_heads, g = h / group;
    const uint len = uint(positions[t]) + 1;
    const uint page_base = uint(seq[t]) * pc.pages_per_seq;
    const uint split = gl_WorkGroupID.y;
    const uint split_begin = pc.split_keys > 0 ? split * pc.split_keys : 0;
    const uint key_end = pc.split_keys > 0 ? min(len, split_begin + pc.split_keys) : len;
    const uint window_begin = pc.window > 0 && len > pc.window ? len - pc.window : 0;  // first visible key
    const uint key_begin = max(split_begin, window_begin);
    for (uint i = tid; i < pc.head_dim; i += wg) qs[i] = q[th * pc.head_dim + i];
    barrier();

    const bool sink = pc.has_sinks != 0 && split == 0;
    float m = sink ? sinks[h] : -1.0 / 0.0, l = sink ? 1.0 : 0.0;
    float acc[DIMS_PER_INVOCATION];
    for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) acc[i] = 0.0;
    for (uint j0 = key_begin; j0 < key_end; j0 += wg) {
      const uint j = j0 + tid;
      float s = -1.0 / 0.0;
      if (j < key_end) {
        const uint row = uint(pages[page_base + j / pc.page_size]) * pc.page_size + j % pc.page_size;
        key_row[tid] = row;
        const uint kb = row * k_stride + g * pc.head_dim;
        // Four independent partial sums: the loads of one key row overlap instead of forming one long chain.
        vec4 dot4 = vec4(0.0);
        uint i = 0;
        for (; i + 4 <= pc.head_dim; i += 4)
          dot4 += vec4(qs[i], qs[i + 1], qs[i + 2], qs[i + 3]) *
                  vec4(CACHE_AT(k_cache, kb + i), CACHE_AT(k_cache, kb + i + 1), CACHE_AT(k_cache, kb + i + 2),
                       CACHE_AT(k_cache, kb + i + 3));
        float dot_qk = (dot4.x + dot4.y) + (dot4.z + dot4.w);
        for (; i < pc.head_dim; ++i) dot_qk += qs[i] * CACHE_AT(k_cache, kb + i);
        s = dot_qk * pc.scale;
      }
      const float m_new = max(m, reduce_max(s));
      const float p = j < key_end ? exp(s - m_new) : 0.0;
      probs[tid] = p;
      const float correction = exp(m - m_new);  // 0 on the first block (m = -inf, no sink)
      l = l * correction + reduce_sum(p);        // reduce_sum's barriers also publish probs[] and key_row[]
      m = m_new;
      const uint block = min(wg, key_end - j0);
      for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) {
        const uint d = tid + i * wg;
        if (d >= pc.head_dim_v) break;
        // Four keys per step into independent partial sums (latency of the V loads overlaps).
        const uint vb = g * pc.head_dim_v + d;
        vec4 a4 = vec4(0.0);
        uint jj = 0;
        for (; jj + 4 <= block; jj += 4)
          a4 += vec4(probs[jj], probs[jj + 1], probs[jj + 2], probs[jj + 3]) *
                vec4(CACHE_AT(v_cache, key_row[jj] * v_stride + vb), CACHE_AT(v_cache, key_row[jj + 1] * v_stride + vb),
                     CACHE_AT(v_cache, key_row[jj + 2] * v_stride + vb),
                     CACHE_AT(v_cache, key_row[jj + 3] * v_stride + vb));
        float a = (a4.x + a4.y) + (a4.z + a4.w);
        for (; jj < block; ++jj) a += probs[jj] * CACHE_AT(v_cache, key_row[jj] * v_stride + vb);
        acc[i] = acc[i] * correction + a;
      }
      barrier();  // probs[] and key_row[] are rewritten by the next block
    }
    if (pc.split_keys == 0) {
      for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) {
        const uint d = tid + i * wg;
        if (d < pc.head_dim_v) o[th * pc.head_dim_v + d] = acc[i] / l;
      }
    } else {
      const uint base = (th * gl_NumWorkGroups.y + split) * (pc.head_dim_v + 2);
      for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) {
        const uint d = tid + i * wg;
        if (d < pc.head_dim_v) partials[base + d] = acc[i];
      }
      if (tid == 0) {
        partials[base + pc.head_dim_v] = m;  // -inf for a split with no keys
        partials[base + pc.head_dim_v + 1] = l;
      }
    }
    barrier();  // qs[] is rewritten by the next (token, head)
  }
}
