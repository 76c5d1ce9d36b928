#version 450
// Decode attention (a few tokens, each attending to its whole cache) with the keys split over workgroups: the same
// contract and partial-result layout as attention.comp's split mode (attention_combine.comp merges the splits), for
// head dims that are multiples of 4 and at most 16 * the subgroup size (and 256 for V).
//
// Layout of the work: workgroup (x, y) = (token t * n_heads / HEADS + head group, split y) takes the HEADS query heads
// h0 .. h0 + HEADS - 1 (h0 = HEADS * (x % (n_heads / HEADS)); spec constant 4, 1, 2 or 4, dividing n_heads /
// n_kv_heads, so they share KV head g = h0 / (n_heads / n_kv_heads)) and keys [y * split_keys, min((y + 1) *
// split_keys, positions[t] + 1)) of the token's sequence (page-table row seq[t]): key j at cache row pages[seq[t] *
// pages_per_seq + j / page_size] * page_size + j % page_size (the paged cache, engine/plan.h). The caches are f32, or
// f16 with CACHE_F16 (read as two 32-bit words per 4 halves, computed in f32), or Q8_0 with CACHE_Q8 (dequantized to
// f32: CACHE_CVT4).
// A subgroup is cut into key slots of LPK lanes (spec constant 5, a power of two): slot i of subgroup s of S walks
// keys s * KPS + i, + S * KPS, ... (KPS = subgroup size / LPK slots), and lane l of a slot holds dims 4 (l + c LPK)
// .. + 3, c < C (spec constant 6, at most 4), of each head's q, of the key and value rows it loads and of its
// output. A key's score is the lane's vec4 dot products summed over its slot's LPK lanes (log2 LPK shuffles, for all
// KPS keys of the subgroup at once), and every slot keeps its own online softmax (running max m, denominator l, its
// output dims) per head: no cross-slot traffic inside the key loop, and the K and V rows a slot loads serve all
// HEADS heads. The slots merge with shuffles after the loop, the subgroups in shared memory, into the split's
// partial result.
// Why: one key per subgroup (each lane 4 dims, a 5-step subgroupAdd per key and head, the K and V rows loaded again
// for every query head of a KV head) made batched decode attention latency-bound: on the H200, 64 sequences of ~600
// positions took 12.7 ms per step for the 8B (8 KV heads) and 13.3 for the 7B (32), alike although the 7B reads 4x
// the bytes (docs/benchmarks.md).
// Sliding window (window > 0): keys j with positions[t] - j < window only. The slots start at the window's first key
// (a split before the window has no keys: m = -inf, l = 0), so keys before the window are not read. A slot whose key
// is past the end scores a valid key row (its lanes take part in the shuffles) and drops it.
// Sinks (has_sinks, binding 10: one f32 logit per query head): slot 0 of subgroup 0 of split 0 starts its online
// softmax at (m, l) = (sinks[h], 1), acc = 0 (a virtual key of value 0), so every merge below counts it exactly once.
//
// MERGE (spec constant 1): the last workgroup of a head group to finish merges its rows' splits itself (the formula
// of attention_combine.comp), so no second dispatch and barrier follow: each workgroup writes its partials, makes
// them visible device-wide and counts itself in the counter of its first row (atomicAdd); the one that brings the
// count to the number of splits reads every partial back (coherent), writes the outputs and resets the counter to 0
// for the next step.
// A decode step is a chain of small dependent dispatches, each costing a few microseconds at its barrier, so this
// removes a stage per layer. Q8_OUT (spec constant 2, needs head_dim_v % 32 == 0): that workgroup also writes the
// row's output as quantize_q8.comp would (int8 per 32 elements, its layout), the input of the int8 output
// projection, which then needs no quantizer dispatch either. F16_OUT (spec constant 7): it also writes the row as f16
// (binding 12, round to nearest even as convert_f16.comp), the input of the cooperative-matrix output projection of a
// batched step, which then needs no conversion dispatch (OpEncoder::f16_target).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
// CACHE_LOAD4(c, i): the raw words of vec4 i of a cache (elements 4i .. 4i + 3), CACHE_RAW4; CACHE_CVT4(raw): them in
// f32. Loads and conversions are apart so that the key loop can issue the next keys' loads before it uses this
// pass's.
#if defined(CACHE_Q8)
// Q8_0 (engine/kv_q8.h): blocks of 32 elements, 9 words each (words 0..7 the int8 values, element 4w + b of the block
// in byte b of word w; word 8 the f32 scale). vec4 i is word (i / 8) * 9 + i % 8, times the block's scale word
// (i / 8) * 9 + 8: two 4-byte loads per lane and key.
#define CACHE_VEC4 uint
#define CACHE_RAW4 uvec2
#define CACHE_LOAD4(c, i) uvec2(c[(i) / 8u * 9u + (i) % 8u], c[(i) / 8u * 9u + 8u])
#define CACHE_CVT4(r) q8_vec4(r.x, r.y)
vec4 q8_vec4(uint word, uint scale) {
  const int w = int(word);
  return uintBitsToFloat(scale) *
         vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8));
}
#elif defined(CACHE_F16)
// Four halves as two 32-bit words: one 8-byte load per lane and key, unpacked to f32.
#define CACHE_VEC4 uvec2
#define CACHE_RAW4 uvec2
#define CACHE_LOAD4(c, i) c[i]
#define CACHE_CVT4(r) vec4(unpackHalf2x16(r.x), unpackHalf2x16(r.y))
#else
#define CACHE_VEC4 vec4
#define CACHE_RAW4 vec4
#define CACHE_LOAD4(c, i) c[i]
#define CACHE_CVT4(r) r
#endif
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Q { vec4 q4[]; };
layout(binding = 1) readonly buffer K { CACHE_VEC4 k4[]; };
layout(binding = 2) readonly buffer V { CACHE_VEC4 v4[]; };
const uint MAX_HEAD_DIM_V = 256;
#include "attention_decode_merge.glsl"

const uint MAX_C = 4;  // vec4 of q / of the output per lane and head
layout(constant_id = 5) const uint LPK = 32;  // lanes per key slot: LPK * C * 4 >= head_dim, head_dim_v
layout(constant_id = 6) const uint C = 1;

// The sum of v over the LPK lanes of this lane's slot (xor shuffles stay within aligned groups of LPK lanes).
float slot_sum(float v) {
  [[unroll]] for (uint o = 1; o < LPK; o <<= 1) v += subgroupShuffleXor(v, o);
  return v;
}

void main() {
  const uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize, sg = gl_SubgroupID, n_sg = gl_NumSubgroups;
  const uint KPS = sgs / LPK, slot = lane / LPK, sub = lane % LPK;
  const uint groups_per_token = pc.n_heads / HEADS;
  const uint t = gl_WorkGroupID.x / groups_per_token, split = gl_WorkGroupID.y;
  const uint h0 = (gl_WorkGroupID.x - t * groups_per_token) * HEADS, g = h0 / (pc.n_heads / pc.n_kv_heads);
  const uint D4 = pc.head_dim / 4, DV4 = pc.head_dim_v / 4;
  const uint len = uint(positions[t]) + 1;
  const uint keys = split_keys(), split_begin = split * keys, key_end = min(len, split_begin + keys);
  const uint window_begin = pc.window > 0 && len > pc.window ? len - pc.window : 0;  // first visible key
  const uint key_begin = max(split_begin, window_begin);
  const uint k_row4 = pc.n_kv_heads * D4, v_row4 = pc.n_kv_heads * DV4;
  const uint page_base = uint(seq[t]) * pc.pages_per_seq;

  vec4 qv[MAX_HEADS][MAX_C], acc[MAX_HEADS][MAX_C];
  float m[MAX_HEADS], l[MAX_HEADS];
  const bool sink = pc.has_sinks != 0 && split == 0 && sg == 0 && slot == 0;
  [[unroll]] for (uint hh = 0; hh < MAX_HEADS; ++hh) {
    if (hh >= HEADS) continue;
    const uint qrow = (t * pc.n_heads + h0 + hh) * D4;
    [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
      const uint d4 = sub + c * LPK;
      qv[hh][c] = c < C && d4 < D4 ? q4[qrow + d4] * pc.scale : vec4(0.0);
      acc[hh][c] = vec4(0.0);
    }
    m[hh] = sink ? sinks[h0 + hh] : -1.0 / 0.0;
    l[hh] = sink ? 1.0 : 0.0;
  }
  // Software pipelining over the passes of the key loop: each slot's K and V words of the next pass are loaded before
  // this pass's are used, and its cache row two passes ahead is looked up, so neither the cache loads nor the page
  // table wait in the loop (a pass that loaded its own keys first waited on their latency every pass).
  const uint stride = n_sg * KPS;
  uint j = key_begin + sg * KPS + slot;
  CACHE_RAW4 k_raw[MAX_C], v_raw[MAX_C];
  uint next_row;
  // The slot's K and V words of cache row `row` into k_raw, v_raw.
#define LOAD_KV(row)                                                                   \
  [[unroll]] for (uint c = 0; c < MAX_C; ++c) {                                        \
    const uint d4 = sub + c * LPK;                                                     \
    if (c < C && d4 < D4) k_raw[c] = CACHE_LOAD4(k4, (row) * k_row4 + g * D4 + d4);    \
    if (c < C && d4 < DV4) v_raw[c] = CACHE_LOAD4(v4, (row) * v_row4 + g * DV4 + d4);  \
  }
  {
    const uint row = cache_row(page_base, min(j, key_end - 1u));
    next_row = cache_row(page_base, min(j + stride, key_end - 1u));
    LOAD_KV(row)
  }
  for (uint j0 = key_begin + sg * KPS; j0 < key_end; j0 += stride, j += stride) {
    const bool valid = j < key_end;  // past the end: a valid key row, scored and dropped
    vec4 kv[MAX_C], vv[MAX_C];
    [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
      const uint d4 = sub + c * LPK;
      kv[c] = c < C && d4 < D4 ? CACHE_CVT4(k_raw[c]) : vec4(0.0);
      vv[c] = c < C && d4 < DV4 ? CACHE_CVT4(v_raw[c]) : vec4(0.0);
    }
    if (j0 + stride < key_end) {  // the next pass's words (uniform per subgroup: j0 is)
      const uint row = next_row;
      next_row = cache_row(page_base, min(j + 2u * stride, key_end - 1u));
      LOAD_KV(row)
    }
    [[unroll]] for (uint hh = 0; hh < MAX_HEADS; ++hh) {
      if (hh >= HEADS) continue;
      float part = 0.0;
      [[unroll]] for (uint c = 0; c < MAX_C; ++c)
        if (c < C) part += dot(qv[hh][c], kv[c]);
      const float s = slot_sum(part);
      // One exp per key and head: the new key either raises the maximum (the old terms scale by exp(m - s), the new
      // one weighs 1) or not (the old terms stay, the new one weighs exp(s - m)).
      const bool raise = s > m[hh];
      const float e = exp(raise ? m[hh] - s : s - m[hh]);  // m = -inf: exp(-inf) = 0
      const float corr = valid && raise ? e : 1.0, p = valid ? (raise ? 1.0 : e) : 0.0;
      if (valid && raise) m[hh] = s;
      l[hh] = l[hh] * corr + p;
      [[unroll]] for (uint c = 0; c < MAX_C; ++c)
        if (c < C) acc[hh][c] = acc[hh][c] * corr + p * vv[c];
    }
  }

  // Merge the slots of the subgroup (lanes sub, sub + LPK, ...): M = max m_i, acc = sum exp(m_i - M) acc_i, l alike;
  // then the subgroups through shared memory.
  [[unroll]] for (uint hh = 0; hh < MAX_HEADS; ++hh) {
    if (hh >= HEADS) continue;
    float big_m = m[hh];
    for (uint o = LPK; o < sgs; o <<= 1) big_m = max(big_m, subgroupShuffleXor(big_m, o));
    const float w = m[hh] == -1.0 / 0.0 ? 0.0 : exp(m[hh] - big_m);
    float sl = l[hh] * w;
    vec4 a[MAX_C];
    [[unroll]] for (uint c = 0; c < MAX_C; ++c) a[c] = acc[hh][c] * w;
    for (uint o = LPK; o < sgs; o <<= 1) {
      sl += subgroupShuffleXor(sl, o);
      [[unroll]] for (uint c = 0; c < MAX_C; ++c)
        if (c < C) a[c] += subgroupShuffleXor(a[c], o);
    }
    const uint e = sg * HEADS + hh;
    if (lane == 0) {
      sg_m[e] = big_m;
      sg_l[e] = sl;
    }
    if (slot == 0)
      [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
        const uint d4 = sub + c * LPK;
        if (c < C && d4 < DV4) sg_acc[e * (MAX_HEAD_DIM_V / 4) + d4] = a[c];
      }
  }
  barrier();
  finish_group(t, h0, split);
}
