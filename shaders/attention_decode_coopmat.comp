#version 450
// Batched decode attention (one query token per sequence, AttentionOp::one_query_per_seq) on cooperative matrices
// (16x16x16, f16 operands, f32 accumulation) for GQA: the HEADS (2..4) query heads of one KV head are the rows of
// one 16-row tile, so the scores S = Q K^T and the output O += P V of a block of 16 keys are matrix products, where
// attention_decode.comp sums each head's dot products over lanes with shuffles, a key at a time per slot. Same work
// layout, bindings, splits and end (attention_decode_merge.glsl: the last workgroup of a head group merges the
// splits, writes int8 / f16 copies) as attention_decode.comp, for f16 caches, head_dim == head_dim_v of 16, 32, 64 or
// 128, and pages of a multiple of 16 positions (a block's keys lie on one page). Subgroups of at least 32.
//
// Workgroup (x, y) = (token t * n_heads / HEADS + head group, split y), subgroups w < 4 (128 invocations). Q's HEADS
// rows (scaled, as f16; rows HEADS..15 zero) become D/16 named A fragments per subgroup, staged once through shared
// memory. Subgroup w takes the blocks of 16 keys w, w + n_sg, ... from the one holding the split's first visible key
// (split_keys() need not be a multiple of 16, nor a sliding window's first key). A block's K rows, then its V rows,
// are staged in the subgroup's shared rows (16-byte loads by 16 lanes per 256-byte row, loaded a block ahead into
// registers so that the latency hides behind the block before; a 16 x 16 fragment then comes from shared memory in
// one matrix load, where straight from the cache V's fragments, whose K dimension is the keys, took 2-byte loads:
// attention twice as slow as attention_decode). S = Q K^T goes through shared memory, where lane 8r + i (r < HEADS)
// takes keys 2i, 2i + 1 of row r: scores of keys outside [first visible key, token's position] are -inf before the
// row's maximum (three shuffles), P = exp(S - m) is written as f16 and O is scaled row by row by alpha through the
// row-id fragment (attention_coopmat.comp explains it); then O += P V. The staged keys are clamped to the visible ones,
// so every cache row read is one of this sequence's written rows: rows past the token's position hold anything
// (another sequence's stale rows, never-written memory: inf or NaN), which P's zeros would not cancel (0 * inf).
// At the end each subgroup's (m, l, O rows < HEADS) go to sg_m, sg_l, sg_acc and finish_group merges them as
// attention_decode.comp does.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Q { vec4 q4[]; };
layout(binding = 1) readonly buffer K { uvec4 k_cache[]; };  // f16 rows, 8 halves per uvec4
layout(binding = 2) readonly buffer V { uvec4 v_cache[]; };
const uint MAX_HEAD_DIM_V = 128;
#include "attention_decode_merge.glsl"

const uint KB = 16;                       // keys per block
const uint MAX_WARPS = 4;                 // subgroups per workgroup (the host keeps within it)
const uint DP = MAX_HEAD_DIM_V / 8 + 1;   // a staged row's stride in uvec4: padded by 16 bytes (no bank conflicts)
const uint MAX_ITEMS = KB * (MAX_HEAD_DIM_V / 8) / 32;  // staged uvec4 per lane and block (subgroups of >= 32)
shared float ss[MAX_WARPS * 256];   // per subgroup: S (16 x 16), the row ids at the start, O's tiles at the end
shared float16_t ps[MAX_WARPS * 256];  // per subgroup: P (rows HEADS..15 stay 0)
shared float row_alpha[MAX_WARPS * 16];
// Per subgroup: the block's staged rows, K's until the scores are taken, then V's; first, Q for the whole workgroup.
shared uvec4 kvs[MAX_WARPS * KB * DP];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Fragments are named variables (matmul_coopmat.comp: arrays of fragments are slow on NVIDIA's driver).
#define Q_LOAD(c) if (16 * c < D) coopMatLoad(qf##c, kvs, 2 * c, DP, gl_CooperativeMatrixLayoutRowMajor);
// S += Q[:, 16c..] K^T[16c.., keys]: K^T column j is key j's row (16 halves, contiguous).
#define QK(c)                                                                                          \
  if (16 * c < D) {                                                                                     \
    FRAG_B kf;                                                                                          \
    coopMatLoad(kf, kvs, kv_base + 2 * c, DP, gl_CooperativeMatrixLayoutColumnMajor);                   \
    s = coopMatMulAdd(qf##c, kf, s);                                                                    \
  }
// O[:, 16c..] += P V[keys, 16c..], V from its staged rows.
#define PV(c)                                                                                           \
  if (16 * c < D) {                                                                                     \
    FRAG_B vf;                                                                                          \
    coopMatLoad(vf, kvs, kv_base + 2 * c, DP, gl_CooperativeMatrixLayoutRowMajor);                       \
    o##c = coopMatMulAdd(pf, vf, o##c);                                                                 \
  }
// O[:, 16c..]'s rows < HEADS into sg_acc, through this subgroup's 16 x 16 tile in ss.
#define STORE_O(c)                                                                                      \
  if (16 * c < D) {                                                                                     \
    coopMatStore(o##c, ss, w * 256, 16, gl_CooperativeMatrixLayoutRowMajor);                            \
    sync_subgroup();                                                                                    \
    for (uint e = lane; e < HEADS * 16; e += sgs) {                                                     \
      const uint r = e / 16, d = 16 * c + e % 16;                                                       \
      sg_acc[(w * HEADS + r) * (MAX_HEAD_DIM_V / 4) + d / 4][d % 4] = ss[w * 256 + e];                  \
    }                                                                                                   \
    sync_subgroup();                                                                                    \
  }
// The lane's staged items of a block (keys j0 .. j0 + 15, cache rows row0 ..): item i = lane + it * sgs is uvec4
// i % D8 of key i / D8 (D8 a power of two), the key clamped to the visible ones [key_begin, key_end) so that every
// row read is a written row of this sequence (the blocks at a split's ends; a whole block's keys are its own).
#define KV_LOAD(raw, cache, j0, row0)                                                                   \
  [[unroll]] for (uint it = 0; it < MAX_ITEMS; ++it) {                                                  \
    const uint i = lane + it * sgs, kk = i >> d8_shift;                                                 \
    if (i < KB * D8)                                                                                    \
      raw[it] = cache[((row0) + clamp((j0) + kk, key_begin, key_end - 1u) - (j0)) * kv_stride + g * D8 + \
                      (i & (D8 - 1u))];                                                                 \
  }
#define KV_STORE(raw, base)                                                                             \
  [[unroll]] for (uint it = 0; it < MAX_ITEMS; ++it) {                                                  \
    const uint i = lane + it * sgs;                                                                     \
    if (i < KB * D8) kvs[(base) + (i >> d8_shift) * DP + (i & (D8 - 1u))] = raw[it];                    \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
  const uint w = gl_SubgroupID, lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize, n_sg = gl_NumSubgroups;
  const uint groups_per_token = pc.n_heads / HEADS;
  const uint t = gl_WorkGroupID.x / groups_per_token, split = gl_WorkGroupID.y;
  const uint h0 = (gl_WorkGroupID.x - t * groups_per_token) * HEADS, g = h0 / (pc.n_heads / pc.n_kv_heads);
  const uint D = pc.head_dim, D4 = D / 4, D8 = D / 8, d8_shift = findLSB(D8);
  const uint len = uint(positions[t]) + 1;
  const uint keys = split_keys(), split_begin = split * keys, key_end = min(len, split_begin + keys);
  const uint window_begin = pc.window > 0 && len > pc.window ? len - pc.window : 0;  // first visible key
  const uint key_begin = max(split_begin, window_begin);
  const uint kv_stride = pc.n_kv_heads * D8;  // uvec4 per cache row
  const uint page_base = uint(seq[t]) * pc.pages_per_seq;
  const uint kv_base = w * KB * DP;
  // The subgroup's first block (keys j0 .. j0 + 15: cache rows row0 .. row0 + 15, one page), loaded before anything
  // else so that its latency overlaps Q's. A split without visible keys (past the token's position, or before its
  // window) takes no block.
  const uint blocks_end = key_begin < key_end ? key_end : 0u;
  const uint step = n_sg * KB;
  uint j0 = key_begin / KB * KB + w * KB;
  const uint row0 = j0 < blocks_end ? cache_row(page_base, j0) : 0u;
  uvec4 k_raw[MAX_ITEMS], v_raw[MAX_ITEMS];
  if (j0 < blocks_end) {
    KV_LOAD(k_raw, k_cache, j0, row0)
    KV_LOAD(v_raw, v_cache, j0, row0)
  }

  // Q's rows, scaled, as f16 (rows HEADS..15 zero), through subgroup 0's staging rows.
  for (uint i = tid; i < 16 * D4; i += WG) {
    const uint r = i / D4, d4 = i - r * D4;
    const vec4 q = r < HEADS ? q4[(t * pc.n_heads + h0 + r) * D4 + d4] * pc.scale : vec4(0.0);
    const uint at = r * DP + d4 / 2;
    if (d4 % 2 == 0) kvs[at].xy = uvec2(packHalf2x16(q.xy), packHalf2x16(q.zw));
    else kvs[at].zw = uvec2(packHalf2x16(q.xy), packHalf2x16(q.zw));
  }
  // This subgroup's P rows and alphas: rows HEADS..15 stay 0 and 1. Row ids: element i of any accumulator of this
  // subgroup lies in row rid[i].
  for (uint e = lane; e < 256; e += sgs) {
    ps[w * 256 + e] = float16_t(0.0);
    ss[w * 256 + e] = float(e / 16);
  }
  if (lane < 16) row_alpha[w * 16 + lane] = 1.0;
  barrier();
  FRAG_A qf0, qf1, qf2, qf3, qf4, qf5, qf6, qf7;
  Q_LOAD(0) Q_LOAD(1) Q_LOAD(2) Q_LOAD(3) Q_LOAD(4) Q_LOAD(5) Q_LOAD(6) Q_LOAD(7)
  FRAG_C rid;
  coopMatLoad(rid, ss, w * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
  barrier();  // Q and the row ids are in registers before kvs and ss are overwritten

  // Softmax lanes: lane 8r + i takes keys 2i, 2i + 1 of row r < HEADS (lanes of rows >= HEADS only join the
  // shuffles). Each row's maximum m is the same in its 8 lanes; l is per lane, summed at the end.
  const uint my_row = lane / 8, my_key = 2 * (lane % 8);
  const bool row_lane = my_row < HEADS;
  const bool sink = pc.has_sinks != 0 && split == 0 && w == 0 && row_lane;
  float m = sink ? sinks[h0 + my_row] : -1.0 / 0.0;
  float l = sink && lane % 8 == 0 ? 1.0 : 0.0;
  FRAG_C o0 = FRAG_C(0.0), o1 = FRAG_C(0.0), o2 = FRAG_C(0.0), o3 = FRAG_C(0.0);
  FRAG_C o4 = FRAG_C(0.0), o5 = FRAG_C(0.0), o6 = FRAG_C(0.0), o7 = FRAG_C(0.0);
  // Each block's K and V are loaded a block ahead (k_raw, v_raw), so their latency hides behind a block's work. K's
  // rows are staged for the scores, then V's in the same rows.
  for (; j0 < blocks_end; j0 += step) {
    KV_STORE(k_raw, kv_base)
    const bool more = j0 + step < blocks_end;
    const uint next_row0 = more ? cache_row(page_base, j0 + step) : 0u;
    sync_subgroup();
    if (more) { KV_LOAD(k_raw, k_cache, j0 + step, next_row0) }
    FRAG_C s = FRAG_C(0.0);
    QK(0) QK(1) QK(2) QK(3) QK(4) QK(5) QK(6) QK(7)
    coopMatStore(s, ss, w * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
    sync_subgroup();
    const uint j = j0 + my_key;
    const float s0 = row_lane && j >= key_begin && j < key_end ? ss[w * 256 + my_row * 16 + my_key] : -1.0 / 0.0;
    const float s1 =
        row_lane && j + 1 >= key_begin && j + 1 < key_end ? ss[w * 256 + my_row * 16 + my_key + 1] : -1.0 / 0.0;
    float bm = max(s0, s1);
    bm = max(bm, subgroupShuffleXor(bm, 1u));
    bm = max(bm, subgroupShuffleXor(bm, 2u));
    bm = max(bm, subgroupShuffleXor(bm, 4u));
    const float m_new = max(m, bm);
    const float base = m_new == -1.0 / 0.0 ? 0.0 : m_new;  // no key of the row yet: every p and alpha is 0
    const float alpha = exp(m - base), p0 = exp(s0 - base), p1 = exp(s1 - base);
    if (row_lane) {
      ps[w * 256 + my_row * 16 + my_key] = float16_t(p0);
      ps[w * 256 + my_row * 16 + my_key + 1] = float16_t(p1);
      if (lane % 8 == 0) row_alpha[w * 16 + my_row] = alpha;
    }
    l = l * alpha + p0 + p1;
    m = m_new;
    KV_STORE(v_raw, kv_base)  // every lane's K fragments were read before the sync above
    if (more) { KV_LOAD(v_raw, v_cache, j0 + step, next_row0) }
    sync_subgroup();
    [[unroll]] for (int i = 0; i < rid.length(); ++i) {
      const float a = row_alpha[w * 16 + uint(rid[i])];
      o0[i] *= a; o1[i] *= a; o2[i] *= a; o3[i] *= a; o4[i] *= a; o5[i] *= a; o6[i] *= a; o7[i] *= a;
    }
    FRAG_A pf;
    coopMatLoad(pf, ps, w * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
    PV(0) PV(1) PV(2) PV(3) PV(4) PV(5) PV(6) PV(7)
    sync_subgroup();  // ss, ps and the staged rows are read before the next block writes them
  }
  l += subgroupShuffleXor(l, 1u);
  l += subgroupShuffleXor(l, 2u);
  l += subgroupShuffleXor(l, 4u);
  if (row_lane && lane % 8 == 0) {
    sg_m[w * HEADS + my_row] = m;
    sg_l[w * HEADS + my_row] = l;
  }
  STORE_O(0) STORE_O(1) STORE_O(2) STORE_O(3) STORE_O(4) STORE_O(5) STORE_O(6) STORE_O(7)
  barrier();
  finish_group(t, h0, split);
}
