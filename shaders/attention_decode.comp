#version 450
// Decode attention (a few tokens, each attending to its whole cache) with the keys split over workgroups: the same
// contract and partial-result layout as attention.comp's split mode (attention_combine.comp merges the splits), for
// head dims that are multiples of 4 and at most 16 * the subgroup size (and 256 for V).
//
// Layout of the work: workgroup (x, y) = (token t * n_heads + query head h, split y) takes keys
// [y * split_keys, min((y + 1) * split_keys, positions[t] + 1)) of KV head g = h / (n_heads / n_kv_heads), of the
// token's sequence (page-table row seq[t]): key j at cache row pages[seq[t] * pages_per_seq + j / page_size] *
// page_size + j % page_size (the paged cache, engine/plan.h). The caches are f32, or f16 with CACHE_F16 (read as
// two 32-bit words per 4 halves, computed in f32), or Q8_0 with CACHE_Q8 (dequantized to f32: CACHE_AT4). Each
// subgroup walks its own keys (subgroup s of S takes keys s, s + S, ...), KEYS at a time: lane i holds dims
// 4i .. 4i + 3 (+ 4 * subgroup size * c) of q, scores each key with one vec4 dot product and a subgroupAdd (a whole
// key row is one coalesced read by the subgroup), and keeps its own online softmax (running max m, denominator l)
// and the output dims it owns. No barrier inside the key loop: the subgroups meet once at the end, in shared memory,
// to merge their (m, l, acc) into the split's partial result.
// Why: attention.comp gives each invocation one key (a subgroup's loads touch a cache line per key) and reduces
// every block of keys with ~14 workgroup barriers; on the H100 decode attention was ~17 % of a 7B decode step.
//
// Sliding window (window > 0): keys j with positions[t] - j < window only. Each subgroup starts at the window's first
// group of KEYS keys (a split before the window has no keys: m = -inf, l = 0), so keys before the window are not
// read; keys of that first group before the window are masked like those past the end (scored on a valid key row).
// Sinks (has_sinks, binding 10: one f32 logit per query head): subgroup 0 of split 0 starts its online softmax at
// (m, l) = (sinks[h], 1), acc = 0 (a virtual key of value 0), so every merge below counts it exactly once.
//
// MERGE (spec constant 1): the last workgroup of a row to finish merges the row's splits itself (the formula of
// attention_combine.comp), so no second dispatch and barrier follow: each workgroup writes its partial, makes it
// visible device-wide and counts itself in counters[row] (atomicAdd); the one that brings the count to the number
// of splits reads every partial back (coherent), writes the output and resets the counter to 0 for the next step.
// A decode step is a chain of small dependent dispatches, each costing a few microseconds at its barrier, so this
// removes a stage per layer. Q8_OUT (spec constant 2, needs head_dim_v % 32 == 0): that workgroup also writes the
// row's output as quantize_q8.comp would (int8 per 32 elements, its layout), the input of the int8 output
// projection, which then needs no quantizer dispatch either.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
// CACHE_AT4(c, i): vec4 i of a cache (elements 4i .. 4i + 3) in f32.
#if defined(CACHE_Q8)
// Q8_0 (engine/kv_q8.h): blocks of 32 elements, 9 words each (words 0..7 the int8 values, element 4w + b of the block
// in byte b of word w; word 8 the f32 scale). vec4 i is word (i / 8) * 9 + i % 8, times the block's scale word
// (i / 8) * 9 + 8: two 4-byte loads per lane and key.
#define CACHE_VEC4 uint
#define CACHE_AT4(c, i) q8_vec4(c[(i) / 8u * 9u + (i) % 8u], c[(i) / 8u * 9u + 8u])
vec4 q8_vec4(uint word, uint scale) {
  const int w = int(word);
  return uintBitsToFloat(scale) *
         vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8));
}
#elif defined(CACHE_F16)
// Four halves as two 32-bit words: one 8-byte load per lane and key, unpacked to f32.
#define CACHE_VEC4 uvec2
#define CACHE_AT4(c, i) vec4(unpackHalf2x16(c[i].x), unpackHalf2x16(c[i].y))
#else
#define CACHE_VEC4 vec4
#define CACHE_AT4(c, i) c[i]
#endif
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Q { vec4 q4[]; };
layout(binding = 1) readonly buffer K { CACHE_VEC4 k4[]; };
layout(binding = 2) readonly buffer V { CACHE_VEC4 v4[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) writeonly buffer Out { float o[]; };  // MERGE only
layout(binding = 5) coherent buffer Partials { float partials[]; };
layout(binding = 6) coherent buffer Counters { uint counters[]; };  // MERGE: per row, 0 between steps
layout(binding = 7) writeonly buffer Q8 { uint q8[]; };             // Q8_OUT: quantize_q8.comp's layout
layout(binding = 8) readonly buffer Seq { int seq[]; };
layout(binding = 9) readonly buffer Pages { int pages[]; };
layout(binding = 10) readonly buffer Sinks { float sinks[]; };  // [n_heads] when has_sinks, else a stand-in
layout(constant_id = 1) const bool MERGE = false;
layout(constant_id = 2) const bool Q8_OUT = false;
// Positions per KV page (the push constant page_size, as a constant so that j / PAGE_SIZE is a shift): a power of
// two and a multiple of KEYS (the host checks), so the KEYS keys a subgroup scores together (j0 % KEYS == 0: splits
// and strides are multiples of KEYS) lie on one page and share one page-table lookup.
layout(constant_id = 3) const uint PAGE_SIZE = 32;
#include "q8_rows.glsl"
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint head_dim_v; float scale; uint split_keys;
  uint page_size; uint pages_per_seq; uint window; uint has_sinks;
} pc;

const uint MAX_C = 4;            // vec4 of q / of the output per lane: head dims up to 16 * the subgroup size
const uint KEYS = 4;             // keys scored together by a subgroup (independent loads and reductions in flight)
const uint MAX_SUBGROUPS = 16;   // the host keeps the workgroup within these
const uint MAX_HEAD_DIM_V = 256;
const uint MAX_SPLITS = 64;      // MERGE: the host uses it for at most this many splits
shared float sg_m[MAX_SUBGROUPS], sg_l[MAX_SUBGROUPS];
shared vec4 sg_acc[MAX_SUBGROUPS * MAX_HEAD_DIM_V / 4];

shared bool is_last;
shared float split_w[MAX_SPLITS];  // exp(m_s - max m) of each split (0 for splits without keys)
shared float block_max[MAX_HEAD_DIM_V / 4];

// MERGE: the row's merged output (invocation tid < head_dim_v / 4 holds dims 4 tid .. 4 tid + 3), and with Q8_OUT the
// same as int8 per 32 dims (8 vec4, 8 invocations; q8_rows.glsl).
void write_row(uint th, uint t, uint h, vec4 merged) {
  const uint tid = gl_LocalInvocationID.x, DV4 = pc.head_dim_v / 4;
  if (tid < DV4) {
    const uint at = th * pc.head_dim_v + 4 * tid;
    o[at] = merged.x, o[at + 1] = merged.y, o[at + 2] = merged.z, o[at + 3] = merged.w;
  }
  if (!Q8_OUT) return;
  const vec4 a = abs(merged);
  if (tid < DV4) block_max[tid] = max(max(a.x, a.y), max(a.z, a.w));
  barrier();
  if (tid < DV4) {
    float m = 0.0;
    for (uint k = 0; k < 8u; ++k) m = max(m, block_max[(tid & ~7u) + k]);
    const uint cols = pc.n_heads * pc.head_dim_v, row = q8_row_base(t, cols);
    const uint g = h * DV4 + tid;  // 4-element group within the token's row
    q8[row + g] = q8_pack(merged, m);
    if ((tid & 7u) == 0u) q8[row + q8_scale_word(cols, g)] = q8_scale_bits(m);
  }
}

// MERGE: called by every workgroup after writing its partial; the last one of row th merges the row.
void merge_splits(uint th, uint t, uint h) {
  const uint tid = gl_LocalInvocationID.x, n_splits = gl_NumWorkGroups.y, row_floats = pc.head_dim_v + 2;
  memoryBarrierBuffer();  // this workgroup's partial is visible before it is counted
  barrier();
  if (tid == 0) is_last = atomicAdd(counters[th], 1u) == n_splits - 1u;
  barrier();
  if (!is_last) return;
  memoryBarrierBuffer();
  const uint row_base = th * n_splits * row_floats;
  // Only the splits that hold keys of this token (the others' m is -inf): a short context merges one or two.
  const uint used = min(n_splits, (uint(positions[t]) + pc.split_keys) / pc.split_keys);
  if (tid < used) split_w[tid] = partials[row_base + tid * row_floats + pc.head_dim_v];
  barrier();
  float big_m = -1.0 / 0.0, den = 0.0;
  for (uint s = 0; s < used; ++s) big_m = max(big_m, split_w[s]);  // the split of the token's own key: finite
  barrier();
  if (tid < used) split_w[tid] = exp(split_w[tid] - big_m);
  barrier();
  for (uint s = 0; s < used; ++s) den += split_w[s] * partials[row_base + s * row_floats + pc.head_dim_v + 1];
  const uint DV4 = pc.head_dim_v / 4;
  vec4 merged = vec4(0.0);
  if (tid < DV4) {
    for (uint s = 0; s < used; ++s) {
      const uint b = row_base + s * row_floats + 4 * tid;
      merged += split_w[s] * vec4(partials[b], partials[b + 1], partials[b + 2], partials[b + 3]);
    }
    merged /= den;
  }
  if (tid == 0) counters[th] = 0u;  // every workgroup of this row has counted: ready for the next step
  write_row(th, t, h, merged);
}

// The cache row of key j of the sequence whose page-table row starts at page_base.
uint cache_row(uint page_base, uint j) { return uint(pages[page_base + j / PAGE_SIZE]) * PAGE_SIZE + j % PAGE_SIZE; }

void main() {
  const uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize, sg = gl_SubgroupID, n_sg = gl_NumSubgroups;
  const uint th = gl_WorkGroupID.x, split = gl_WorkGroupID.y;
  const uint t = th / pc.n_heads, h = th - t * pc.n_heads, g = h / (pc.n_heads / pc.n_kv_heads);
  const uint D4 = pc.head_dim / 4, DV4 = pc.head_dim_v / 4;
  const uint len = uint(positions[t]) + 1;
  const uint split_begin = split * pc.split_keys, key_end = min(len, split_begin + pc.split_keys);
  const uint window_begin = pc.window > 0 && len > pc.window ? len - pc.window : 0;  // first visible key
  // Groups of KEYS keys stay aligned (one page each): start at the group holding the window's first key.
  const uint key_begin = max(split_begin, window_begin & ~(KEYS - 1u));
  const uint k_row4 = pc.n_kv_heads * D4, v_row4 = pc.n_kv_heads * DV4;
  const uint page_base = uint(seq[t]) * pc.pages_per_seq;

  vec4 qv[MAX_C], acc[MAX_C];
  [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
    const uint d4 = lane + c * sgs;
    qv[c] = d4 < D4 ? q4[th * D4 + d4] * pc.scale : vec4(0.0);
    acc[c] = vec4(0.0);
  }
  const bool sink = pc.has_sinks != 0 && split == 0 && sg == 0;
  float m = sink ? sinks[h] : -1.0 / 0.0, l = sink ? 1.0 : 0.0;
  // The page-table lookup of the next group is issued an iteration ahead, so the K loads never wait for it.
  uint row0 = key_begin + sg * KEYS < key_end ? cache_row(page_base, key_begin + sg * KEYS) : 0u;
  for (uint j0 = key_begin + sg * KEYS; j0 < key_end; j0 += n_sg * KEYS) {
    const uint j_next = j0 + n_sg * KEYS;
    const uint next_row0 = j_next < key_end ? cache_row(page_base, j_next) : 0u;
    float s[KEYS];
    uint row[KEYS];  // the keys' cache rows: one page-table lookup for the group (one page, see PAGE_SIZE)
    const uint k_first = j0 < window_begin ? window_begin - j0 : 0u;  // keys before it are outside the window
    [[unroll]] for (uint k = 0; k < KEYS; ++k) {
      // Before the window or past the end: score a valid key of the group, then drop it below.
      row[k] = row0 + clamp(k, k_first, key_end - 1u - j0);
      float part = 0.0;
      [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
        const uint d4 = lane + c * sgs;
        if (d4 < D4) part += dot(qv[c], CACHE_AT4(k4, row[k] * k_row4 + g * D4 + d4));
      }
      s[k] = subgroupAdd(part);
    }
    float m_new = m;
    [[unroll]] for (uint k = 0; k < KEYS; ++k)
      if (j0 + k < key_end && k >= k_first) m_new = max(m_new, s[k]);
    const float corr = exp(m - m_new);  // 0 while m = -inf
    float p[KEYS];
    float p_sum = 0.0;
    [[unroll]] for (uint k = 0; k < KEYS; ++k) {
      p[k] = j0 + k < key_end && k >= k_first ? exp(s[k] - m_new) : 0.0;
      p_sum += p[k];
    }
    l = l * corr + p_sum;
    m = m_new;
    [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
      const uint d4 = lane + c * sgs;
      if (d4 >= DV4) continue;
      vec4 a = acc[c] * corr;
      [[unroll]] for (uint k = 0; k < KEYS; ++k) a += p[k] * CACHE_AT4(v4, row[k] * v_row4 + g * DV4 + d4);
      acc[c] = a;
    }
    row0 = next_row0;
  }

  // Merge the subgroups: M = max m_s, acc = sum exp(m_s - M) acc_s, l = sum exp(m_s - M) l_s.
  if (lane == 0) {
    sg_m[sg] = m;
    sg_l[sg] = l;
  }
  [[unroll]] for (uint c = 0; c < MAX_C; ++c) {
    const uint d4 = lane + c * sgs;
    if (d4 < DV4) sg_acc[sg * (MAX_HEAD_DIM_V / 4) + d4] = acc[c];
  }
  barrier();
  float big_m = -1.0 / 0.0;
  for (uint i = 0; i < n_sg; ++i) big_m = max(big_m, sg_m[i]);
  if (MERGE && gl_NumWorkGroups.y == 1u) {
    // One split holds every key (a short context): the row is complete here, so no partial, counter or re-read.
    // The host keeps head_dim_v / 4 <= the workgroup size.
    float big_l = 0.0;
    vec4 a = vec4(0.0);
    for (uint i = 0; i < n_sg; ++i) {
      if (sg_m[i] == -1.0 / 0.0) continue;
      const float w = exp(sg_m[i] - big_m);
      big_l += w * sg_l[i];
      if (gl_LocalInvocationID.x < DV4) a += w * sg_acc[i * (MAX_HEAD_DIM_V / 4) + gl_LocalInvocationID.x];
    }
    write_row(th, t, h, a / big_l);
    return;
  }
  const uint base = (th * gl_NumWorkGroups.y + split) * (pc.head_dim_v + 2);
  for (uint d4 = gl_LocalInvocationID.x; d4 < DV4; d4 += gl_WorkGroupSize.x) {
    vec4 a = vec4(0.0);
    for (uint i = 0; i < n_sg; ++i)
      if (sg_m[i] > -1.0 / 0.0) a += exp(sg_m[i] - big_m) * sg_acc[i * (MAX_HEAD_DIM_V / 4) + d4];
    partials[base + 4 * d4] = a.x;
    partials[base + 4 * d4 + 1] = a.y;
    partials[base + 4 * d4 + 2] = a.z;
    partials[base + 4 * d4 + 3] = a.w;
  }
  if (gl_LocalInvocationID.x == 0) {
    float big_l = 0.0;
    for (uint i = 0; i < n_sg; ++i)
      if (sg_m[i] > -1.0 / 0.0) big_l += exp(sg_m[i] - big_m) * sg_l[i];
    partials[base + pc.head_dim_v] = big_m;  // -inf for a split with no keys
    partials[base + pc.head_dim_v + 1] = big_l;
  }
  if (MERGE) merge_splits(th, t, h);
}
