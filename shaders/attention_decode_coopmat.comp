#version 450
// Batched decode attention (one query token per sequence, AttentionOp::one_query_per_seq) on cooperative matrices
// (f16 operands, f32 accumulation) for GQA: the HEADS query heads of one KV head are the columns of one tile, so the
// scores of a block of 16 keys, S^T = K Q^T (keys x heads), and the output O^T += V^T P^T (head dims x heads)
// are matrix products, where attention_decode.comp sums each head's dot products over lanes with shuffles, a key at
// a time per slot. Same work layout, bindings, splits and end (attention_decode_merge.glsl: the last workgroup of a
// head group merges the splits, writes int8 / f16 copies) as attention_decode.comp, for f16 caches, head_dim ==
// head_dim_v of 16, 32, 64 or 128, and pages of a multiple of 16 positions (a block's keys lie on one page).
// Subgroups of at least 32.
// The tile's columns: NH (a define) of 8 where the device has 16x8x16 products (NVIDIA: one mma.m16n8k16 each, and
// half the accumulator registers of 16 columns), else 16 (every KHR device with f16 products). Keys and head dims
// are the 16 rows. HEADS is 2, 3 or 4, or 8 on the 8-column tile (groups of 8 query heads per KV head, e.g. the
// Llama-3-70B shape: one workgroup reads the KV head's rows for all 8, where 16 columns took two workgroups of 4).
//
// Workgroup (x, y) = (token t * n_heads / HEADS + head group, split y), subgroups w < 4 (128 invocations). Q's HEADS
// rows (scaled, as f16; rows HEADS..15 zero) become D/16 named B fragments (Q^T: head dims x heads) per subgroup,
// staged once through shared memory. Subgroup w takes the blocks of 16 keys w, w + n_sg, ... from the one holding
// the split's first visible key (split_keys() need not be a multiple of 16, nor a sliding window's first key). A
// block's K rows, then its V rows, are staged in the subgroup's shared rows (16-byte loads by 16 lanes per 256-byte
// row, loaded a block ahead into registers so that the latency hides behind the block before; a 16 x 16 fragment
// then comes from shared memory in one matrix load: K's as A row-major, V^T's as A column-major, where straight from
// the cache V's fragments, whose K dimension is the keys, took 2-byte loads: attention twice as slow as
// attention_decode). S^T goes through shared memory column-major, so that head r's 16 scores are a row of 16 floats:
// LPR lanes per head take KPL keys each (8 x 2, or 4 x 4 for 8 heads): scores of keys outside [first visible key,
// token's position] are -inf before the head's maximum (shuffles), P = exp(S - m) is written as f16 (P^T's columns)
// and O^T is scaled column by column by alpha through the column-id fragment (element i of every accumulator of a
// subgroup lies in column cid[i]); then O^T += V^T P^T. The staged keys are clamped to the visible ones, so every
// cache row read is one of this sequence's written rows: rows past the token's position hold anything (another
// sequence's stale rows, never-written memory: inf or NaN), which P's zeros would not cancel (0 * inf).
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
#ifndef NH
#define NH 16
#endif
#if NH == 8
#define MERGE_SLOTS 32  // 4 subgroups x up to 8 heads
#endif
#include "attention_decode_merge.glsl"

const uint KB = 16;                       // keys per block
const uint MAX_WARPS = 4;                 // subgroups per workgroup (the host keeps within it)
const uint DP = MAX_HEAD_DIM_V / 8 + 1;   // a staged row's stride in uvec4: padded by 16 bytes (no bank conflicts)
const uint MAX_ITEMS = KB * (MAX_HEAD_DIM_V / 8) / 32;  // staged uvec4 per lane and block (subgroups of >= 32)
// Per subgroup: S^T (16 keys x NH heads, column-major), the column ids at the start, O^T's tiles at the end.
shared float ss[MAX_WARPS * 16 * NH];
shared float16_t ps[MAX_WARPS * 16 * NH];  // per subgroup: P^T (column-major; columns HEADS..NH - 1 stay 0)
shared float row_alpha[MAX_WARPS * 16];
// Per subgroup: the block's staged rows, K's until the scores are taken, then V's; first, Q for the whole workgroup.
shared uvec4 kvs[MAX_WARPS * KB * DP];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, NH, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, NH, gl_MatrixUseAccumulator>
const uint TILE = 16 * NH;  // a subgroup's floats in ss and halves in ps
const uint LPR = HEADS > 4u ? 4u : 8u, KPL = 16u / LPR;  // softmax lanes per head, keys per lane (see main)

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Fragments are named variables (matmul_coopmat.comp: arrays of fragments are slow on NVIDIA's driver).
// Q^T[16c.., heads]: column r is head r's staged row (16 halves, contiguous).
#define Q_LOAD(c) if (16 * c < D) coopMatLoad(qf##c, kvs, 2 * c, DP, gl_CooperativeMatrixLayoutColumnMajor);
// S^T += K[keys, 16c..] Q^T[16c.., heads]: K's row j is key j's staged row.
#define QK(c)                                                                                          \
  if (16 * c < D) {                                                                                     \
    FRAG_A kf;                                                                                          \
    coopMatLoad(kf, kvs, kv_base + 2 * c, DP, gl_CooperativeMatrixLayoutRowMajor);                      \
    s = coopMatMulAdd(kf, qf##c, s);                                                                    \
  }
// O^T[16c.., heads] += V^T[16c.., keys] P^T: V^T's column j is key j's staged row.
#define PV(c)                                                                                           \
  if (16 * c < D) {                                                                                     \
    FRAG_A vf;                                                                                          \
    coopMatLoad(vf, kvs, kv_base + 2 * c, DP, gl_CooperativeMatrixLayoutColumnMajor);                   \
    o##c = coopMatMulAdd(vf, pf, o##c);                                                                 \
  }
// O^T[16c.., heads < HEADS] into sg_acc, through this subgroup's tile in ss (column-major: head r's 16 dims at 16 r).
#define STORE_O(c)                                                                                      \
  if (16 * c < D) {                                                                                     \
    coopMatStore(o##c, ss, w * TILE, 16, gl_CooperativeMatrixLayoutColumnMajor);                        \
    sync_subgroup();                                                                                    \
    for (uint e = lane; e < HEADS * 16; e += sgs) {                                                     \
      const uint r = e / 16, d = 16 * c + e % 16;                                                       \
      sg_acc[(w * HEADS + r) * (MAX_HEAD_DIM_V / 4) + d / 4][d % 4] = ss[w * TILE + e];                 \
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
  // This subgroup's P^T columns and alphas: columns HEADS..NH - 1 stay 0 and 1. Column ids (a row-major tile of
  // column indices): element i of any accumulator of this subgroup lies in column cid[i].
  for (uint e = lane; e < TILE; e += sgs) {
    ps[w * TILE + e] = float16_t(0.0);
    ss[w * TILE + e] = float(e % NH);
  }
  if (lane < 16) row_alpha[w * 16 + lane] = 1.0;
  barrier();
  FRAG_B qf0, qf1, qf2, qf3, qf4, qf5, qf6, qf7;
  Q_LOAD(0) Q_LOAD(1) Q_LOAD(2) Q_LOAD(3) Q_LOAD(4) Q_LOAD(5) Q_LOAD(6) Q_LOAD(7)
  FRAG_C cid;
  coopMatLoad(cid, ss, w * TILE, NH, gl_CooperativeMatrixLayoutRowMajor);
  barrier();  // Q and the column ids are in registers before kvs and ss are overwritten

  // Softmax lanes: LPR lanes per head (8, or 4 for more than 4 heads, so that 32 lanes cover 8), lane LPR r + i
  // taking keys KPL i .. KPL i + KPL - 1 of head r < HEADS (lanes of heads >= HEADS only join the shuffles). Each
  // head's maximum m is the same in its LPR lanes; l is per lane, summed at the end.
  const uint my_row = lane / LPR, my_key = KPL * (lane % LPR);
  const bool row_lane = my_row < HEADS;
  const bool sink = pc.has_sinks != 0 && split == 0 && w == 0 && row_lane;
  float m = sink ? sinks[h0 + my_row] : -1.0 / 0.0;
  float l = sink && lane % LPR == 0 ? 1.0 : 0.0;
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
    coopMatStore(s, ss, w * TILE, 16, gl_CooperativeMatrixLayoutColumnMajor);
    sync_subgroup();
    const uint j = j0 + my_key;
    float sc[4];
    float bm = -1.0 / 0.0;
    [[unroll]] for (uint i = 0; i < 4u; ++i)
      if (i < KPL) {
        sc[i] = row_lane && j + i >= key_begin && j + i < key_end ? ss[w * TILE + my_row * 16 + my_key + i] : -1.0 / 0.0;
        bm = max(bm, sc[i]);
      }
    for (uint o = 1u; o < LPR; o <<= 1u) bm = max(bm, subgroupShuffleXor(bm, o));
    const float m_new = max(m, bm);
    const float base = m_new == -1.0 / 0.0 ? 0.0 : m_new;  // no key of the row yet: every p and alpha is 0
    const float alpha = exp(m - base);
    l *= alpha;
    [[unroll]] for (uint i = 0; i < 4u; ++i)
      if (i < KPL) {
        const float p = exp(sc[i] - base);
        if (row_lane) ps[w * TILE + my_row * 16 + my_key + i] = float16_t(p);
        l += p;
      }
    if (row_lane && lane % LPR == 0) row_alpha[w * 16 + my_row] = alpha;
    m = m_new;
    KV_STORE(v_raw, kv_base)  // every lane's K fragments were read before the sync above
    if (more) { KV_LOAD(v_raw, v_cache, j0 + step, next_row0) }
    sync_subgroup();
    [[unroll]] for (int i = 0; i < cid.length(); ++i) {
      const float a = row_alpha[w * 16 + uint(cid[i])];
      o0[i] *= a; o1[i] *= a; o2[i] *= a; o3[i] *= a; o4[i] *= a; o5[i] *= a; o6[i] *= a; o7[i] *= a;
    }
    FRAG_B pf;
    coopMatLoad(pf, ps, w * TILE, 16, gl_CooperativeMatrixLayoutColumnMajor);
    PV(0) PV(1) PV(2) PV(3) PV(4) PV(5) PV(6) PV(7)
    sync_subgroup();  // ss, ps and the staged rows are read before the next block writes them
  }
  for (uint o = 1u; o < LPR; o <<= 1u) l += subgroupShuffleXor(l, o);
  if (row_lane && lane % LPR == 0) {
    sg_m[w * HEADS + my_row] = m;
    sg_l[w * HEADS + my_row] = l;
  }
  STORE_O(0) STORE_O(1) STORE_O(2) STORE_O(3) STORE_O(4) STORE_O(5) STORE_O(6) STORE_O(7)
  barrier();
  finish_group(t, h0, split);
}
