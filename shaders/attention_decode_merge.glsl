// What the decode attention kernels share (attention_decode.comp, attention_decode_coopmat.comp): bindings 3-12, the
// push constants, spec constants 1-4 and 7, and the end of a workgroup (finish_group): its subgroups' per-head (m, l,
// output) merged into its split's partial, and with MERGE the last workgroup of a head group merging every split.
// The includer declares bindings 0-2 (q4, the caches), the workgroup size and MAX_HEAD_DIM_V (the largest head_dim_v
// it takes, sizing sg_acc) first, and fills sg_m, sg_l and sg_acc (at subgroup * HEADS + head) before finish_group.
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) writeonly buffer Out { float o[]; };  // MERGE only
layout(binding = 5) coherent buffer Partials { float partials[]; };
layout(binding = 6) coherent buffer Counters { uint counters[]; };  // MERGE: per row, 0 between steps
layout(binding = 7) writeonly buffer Q8 { uint q8[]; };             // Q8_OUT: quantize_q8.comp's layout
layout(binding = 8) readonly buffer Seq { int seq[]; };
layout(binding = 9) readonly buffer Pages { int pages[]; };
layout(binding = 10) readonly buffer Sinks { float sinks[]; };  // [n_heads] when has_sinks, else a stand-in
// MERGE: this dispatch's indirect arguments {rows, splits, 1, keys per split}, which the backend writes before each
// step for the step's longest sequence (OpEncoder::step_split_groups); a stand-in without MERGE (pc.split_keys then).
layout(binding = 11) readonly buffer SplitArgs { uint split_args[]; };
layout(binding = 12) writeonly buffer OutF16 { uvec2 o16[]; };  // F16_OUT: 4 halves per uvec2; else a stand-in
layout(constant_id = 1) const bool MERGE = false;
layout(constant_id = 2) const bool Q8_OUT = false;
// Positions per KV page (the push constant page_size, as a constant so that j / PAGE_SIZE is a shift for the page
// sizes the engine uses, powers of two).
layout(constant_id = 3) const uint PAGE_SIZE = 32;
#define Q8_FROM_LANES  // q8_block_max8
#include "q8_rows.glsl"
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint head_dim_v; float scale; uint split_keys;
  uint page_size; uint pages_per_seq; uint window; uint has_sinks;
} pc;

const uint MAX_HEADS = 4;  // attention_decode's
// (subgroup, head) slots of the merge: the includer may define MERGE_SLOTS (attention_decode_coopmat: 4 subgroups of 8
// heads on its 8-column tile); the host keeps subgroups x HEADS within them.
#ifndef MERGE_SLOTS
#define MERGE_SLOTS 16
#endif
const uint MAX_SUBGROUPS = MERGE_SLOTS;

// Keys per split (the split y takes keys [y * split_keys(), (y + 1) * split_keys())).
uint split_keys() { return MERGE ? split_args[3] : pc.split_keys; }
layout(constant_id = 4) const uint HEADS = 1;  // query heads per workgroup, sharing one KV head
layout(constant_id = 7) const bool F16_OUT = false;
// Per (subgroup, head): the merged (m, l) and output of its slots.
shared float sg_m[MAX_SUBGROUPS], sg_l[MAX_SUBGROUPS];
shared vec4 sg_acc[MAX_SUBGROUPS * MAX_HEAD_DIM_V / 4];

shared bool is_last;

// The cache row of key j of the sequence whose page-table row starts at page_base.
uint cache_row(uint page_base, uint j) { return uint(pages[page_base + j / PAGE_SIZE]) * PAGE_SIZE + j % PAGE_SIZE; }

// Item idx < HEADS * DV4 of the workgroup's rows (head h0 + idx / DV4, dims 4 (idx % DV4) .. + 3), merged: written
// as f32, as f16 (F16_OUT) and as int8 (Q8_OUT: a 32-dim block's maximum over its 8 items, 8 consecutive invocations
// of one subgroup, all active: HEADS * DV4 and the workgroup size are multiples of 8; q8_rows.glsl).
void write_item(uint t, uint h, uint d4, vec4 v) {
  const uint at = (t * pc.n_heads + h) * pc.head_dim_v + 4 * d4;
  o[at] = v.x, o[at + 1] = v.y, o[at + 2] = v.z, o[at + 3] = v.w;
  if (F16_OUT) o16[at / 4u] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  if (Q8_OUT) {
    const float m = q8_block_max8(v);
    const uint cols = pc.n_heads * pc.head_dim_v, row = q8_row_base(t, cols), g = h * (pc.head_dim_v / 4) + d4;
    q8[row + g] = q8_pack(v, m);
    if ((g & 7u) == 0u) q8[row + q8_scale_word(cols, g)] = q8_scale_bits(m);
  }
}

// The end of a workgroup: its subgroups' (m, l, acc) per head (sg_* at sg * HEADS + hh) merged into the split's
// partial of each of its HEADS rows, or with MERGE and one split into the rows themselves; with MERGE, the last
// workgroup of the (token, head group) to count merges the splits of all its rows (the formula of
// attention_combine.comp; one counter per group, its first head's row counter). Every step covers all HEADS x DV4
// items at once: a merge per head, one after the other with its own barriers and counter, cost a 4-head workgroup
// four merges' latency in a row (about 6 us each on the H200: docs/benchmarks.md).
void finish_group(uint t, uint h0, uint split) {
  const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x, n_sg = gl_NumSubgroups;
  const uint DV = pc.head_dim_v, DV4 = DV / 4, n_items = HEADS * DV4, n_splits = gl_NumWorkGroups.y;
  const uint row_floats = DV + 2;
  const bool single = MERGE && n_splits == 1u;  // one split holds every key: no partial, counter or re-read
  for (uint idx = tid; idx < n_items; idx += WG) {
    const uint hh = idx / DV4, d4 = idx - hh * DV4;
    float big_m = -1.0 / 0.0;
    for (uint i = 0; i < n_sg; ++i) big_m = max(big_m, sg_m[i * HEADS + hh]);
    float big_l = 0.0;
    vec4 a = vec4(0.0);
    for (uint i = 0; i < n_sg; ++i) {
      const uint e = i * HEADS + hh;
      if (sg_m[e] == -1.0 / 0.0) continue;  // a subgroup without keys
      const float w = exp(sg_m[e] - big_m);
      big_l += w * sg_l[e];
      a += w * sg_acc[e * (MAX_HEAD_DIM_V / 4) + d4];
    }
    if (single) {
      write_item(t, h0 + hh, d4, a / big_l);
    } else {
      const uint base = ((t * pc.n_heads + h0 + hh) * n_splits + split) * row_floats;
      partials[base + 4 * d4] = a.x, partials[base + 4 * d4 + 1] = a.y;
      partials[base + 4 * d4 + 2] = a.z, partials[base + 4 * d4 + 3] = a.w;
      if (d4 == 0) {
        partials[base + DV] = big_m;  // -inf for a split with no keys
        partials[base + DV + 1] = big_l;
      }
    }
  }
  if (!MERGE || single) return;
  const uint counter = t * pc.n_heads + h0;
  memoryBarrierBuffer();  // this workgroup's partials are visible before it is counted
  barrier();
  if (tid == 0) is_last = atomicAdd(counters[counter], 1u) == n_splits - 1u;
  barrier();
  if (!is_last) return;
  memoryBarrierBuffer();
  // Only the splits that hold keys of this token (the others' m is -inf): a short context merges one or two.
  // Past 4 splits the invocations beyond the items (a one-head workgroup has 32 items for 128 invocations) take a
  // share of the splits each: part p of P merges splits p, p + P, ..., four at a time with their loads issued
  // together, and part 0 merges the parts through shared memory. The loads are L2 round trips after the counter's:
  // one after the other, a merge of 16 splits waited on 32 of them. Up to 4 splits (a short context) one part takes
  // them all at once, without the parts' barrier and shared-memory round (which cost single-sequence tg128 0.5 %).
  const uint keys = split_keys(), used = min(n_splits, (uint(positions[t]) + keys) / keys);
  const uint P = n_items < WG && used > 4u ? min(WG / n_items, MAX_SUBGROUPS / HEADS) : 1u;
  const uint part = tid / n_items;
  for (uint idx = tid - part * n_items; part < P && idx < n_items; idx += WG) {
    const uint hh = idx / DV4, d4 = idx - hh * DV4;
    const uint row_base = (t * pc.n_heads + h0 + hh) * n_splits * row_floats;
    float m = -1.0 / 0.0, den = 0.0;  // online over this part's splits
    vec4 merged = vec4(0.0);
    for (uint s0 = part; s0 < used; s0 += 4u * P) {
      float ms[4], ls[4];
      vec4 vs[4];
      [[unroll]] for (uint u = 0; u < 4u; ++u) {
        const uint s = s0 + u * P, b = row_base + min(s, used - 1u) * row_floats;
        ms[u] = s < used ? partials[b + DV] : -1.0 / 0.0;
        ls[u] = partials[b + DV + 1];
        const uint at = b + 4 * d4;
        vs[u] = vec4(partials[at], partials[at + 1], partials[at + 2], partials[at + 3]);
      }
      [[unroll]] for (uint u = 0; u < 4u; ++u) {
        if (ms[u] == -1.0 / 0.0) continue;  // a split without keys, or past the used ones
        const float new_m = max(m, ms[u]), keep = exp(m - new_m), w = exp(ms[u] - new_m);
        den = den * keep + w * ls[u];
        merged = merged * keep + w * vs[u];
        m = new_m;
      }
    }
    if (P == 1u) {
      write_item(t, h0 + hh, d4, merged / den);
    } else {
      sg_acc[part * n_items + idx] = merged;
      if (d4 == 0u) sg_m[part * HEADS + hh] = m, sg_l[part * HEADS + hh] = den;
    }
  }
  if (P > 1u) {
    barrier();
    if (tid < n_items) {
      const uint hh = tid / DV4, d4 = tid - hh * DV4;
      float big_m = -1.0 / 0.0;  // finite: the part holding the token's own key
      for (uint q = 0; q < P; ++q) big_m = max(big_m, sg_m[q * HEADS + hh]);
      float den = 0.0;
      vec4 merged = vec4(0.0);
      for (uint q = 0; q < P; ++q) {
        const float w = exp(sg_m[q * HEADS + hh] - big_m);  // 0 for a part without keys
        den += w * sg_l[q * HEADS + hh];
        merged += w * sg_acc[q * n_items + tid];
      }
      write_item(t, h0 + hh, d4, merged / den);
    }
  }
  if (tid == 0) counters[counter] = 0u;  // every workgroup of this group has counted: ready for the next step
}

