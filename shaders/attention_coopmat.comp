#version 450
// Causal prefill attention on cooperative matrices (VK_KHR_cooperative_matrix 16x16x16, f16 operands, f32
// accumulation): the same contract as attention.comp (the paged cache, several sequences per step) for head dims that
// are multiples of 16 and at most 128. The caches are f32 (converted to f16 when staged), or f16 with CACHE_F16
// (staged as they are), or Q8_0 with CACHE_Q8 (dequantized in f32, then converted to f16 when staged).
//
// A workgroup of WARPS subgroups (spec constant 1, at most 4; local size = WARPS * the subgroup size, spec constant 0)
// owns 16 * WARPS consecutive query tokens of one head h (KV head g = h / (n_heads / n_kv_heads)); subgroup w owns
// the 16 rows 16w .. 16w + 15. Workgroups are numbered from the last query tokens down: under the causal mask those
// visit the most keys, so they start first and the short ones fill in behind them. Q is converted to f16 once and
// kept in D/16 named A-fragments per subgroup. Keys and values are visited in blocks of 32, staged as f16 in shared
// memory by the whole workgroup (row-major [key][dim] with a padded row stride of D + 8 halves, so that the 8 rows
// of a 16-byte-per-row fragment read fall in distinct banks; K read column-major is K^T); each invocation's global
// loads of the next block are issued before the current block's multiply-adds and stored after them.
// One pass with the online softmax, per block:
//   S (16 x 32) = Q K^T -> shared; two invocations per row (combined with a shuffle) take the row's new maximum m'
//   of the scaled scores (causal mask: key > positions[t] is left out), alpha = exp(m - m'), P = exp(S * scale - m')
//   as f16 -> shared (masked keys 0) and l = l * alpha + sum P; the 16 rows' invocations visit their keys in rotated
//   order (row r starts at key r), so a read of S touches 32 distinct banks;
//   O (16 x D, D/16 named f32 accumulators) is scaled row by row by alpha, then O += P V.
// KHR cooperative matrices have no row-wise scaling, and which rows a lane's accumulator elements belong to is the
// implementation's choice; but it is the same for every matrix of one type. So each subgroup loads, once, an
// accumulator whose element (r, c) is r: its element i names the row of element i of every O fragment, and the
// scaling is a multiply per element by that row's alpha (read from shared memory). This replaced two passes (the
// maximum first, Q K^T computed twice) and, before them, O kept in shared memory.
// Finally out = O / l, through a 16 x 16 f32 tile per subgroup. Rows past n_tokens are computed with every key
// masked and never written.
// Several sequences: a workgroup's rows may span several of them (a step's tokens are grouped by sequence, positions
// increasing within one: engine/plan.h). The rows of one sequence are a run of consecutive rows; the key loop above
// runs once per run (a single-sequence tile: once, as before), over that sequence's keys 0 .. its largest position in
// the tile, staged through its page table (each staged key row looked up: row = pages[s * pages_per_seq + j /
// page_size] * page_size + j % page_size), with the rows outside the run masked. The online softmax of a masked row
// is unchanged by a block (alpha 1, p 0), so the runs simply add up per row.
// Sliding window (window > 0): a row sees keys j with its position - j < window only. A run's key loop starts at the
// block holding the first key any of its rows sees (keys before it are never staged), the rows' masks drop the keys
// before their own windows, and staged keys before the run's first visible key are zeros (as those past the end).
// Sinks (has_sinks, binding 7: one f32 logit per query head): every row's online softmax starts at (m, l) =
// (sinks[h], 1) with O = 0 -- a virtual key of value 0 that joins the maximum and the denominator.
// Shared memory at D = 128, WARPS = 4: K and V 17 KiB (also staging Q), S 8 KiB, P 4 KiB, row state 1 KiB.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
// CACHE_WORD: a cache buffer's element; CACHE_VEC4: what kv_load holds of one staged vec4 (CACHE_LOAD(c, i): vec4 i,
// elements 4i .. 4i + 3), converted to f16 by TO_F16VEC4 when staged.
#if defined(CACHE_Q8)
// Q8_0 (engine/kv_q8.h): blocks of 32 elements, 9 words each (words 0..7 the int8 values, element 4w + b of the block
// in byte b of word w; word 8 the f32 scale). vec4 i is word (i / 8) * 9 + i % 8 with the block's scale word
// (i / 8) * 9 + 8: both loaded, dequantized in f32 (as the other kernels), then rounded to f16.
#define CACHE_WORD uint
#define CACHE_VEC4 uvec2
#define CACHE_LOAD(c, i) uvec2(c[(i) / 8u * 9u + (i) % 8u], c[(i) / 8u * 9u + 8u])
#define TO_F16VEC4(r) f16vec4(uintBitsToFloat((r).y) * vec4(bitfieldExtract(int((r).x), 0, 8), \
    bitfieldExtract(int((r).x), 8, 8), bitfieldExtract(int((r).x), 16, 8), bitfieldExtract(int((r).x), 24, 8)))
#elif defined(CACHE_F16)
// Four halves as two 32-bit words: one 8-byte load per staged item, converted bit for bit (unpackFloat2x16).
#define CACHE_WORD uvec2
#define CACHE_VEC4 uvec2
#define CACHE_LOAD(c, i) c[i]
#define TO_F16VEC4(r) f16vec4(unpackFloat2x16((r).x), unpackFloat2x16((r).y))
#else
#define CACHE_WORD vec4
#define CACHE_VEC4 vec4
#define CACHE_LOAD(c, i) c[i]
#define TO_F16VEC4(r) f16vec4(r)
#endif
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint WARPS = 4;
// Positions per KV page (= the push constant page_size; a constant so that the lookup is a shift): a multiple of the
// 32-key block (the host checks), so a block's keys lie on one page and take one page-table lookup.
layout(constant_id = 2) const uint PAGE_SIZE = 32;
layout(binding = 0) readonly buffer Q { vec4 q4[]; };       // D % 16 == 0: rows start on a vec4
layout(binding = 1) readonly buffer K { CACHE_WORD k_cache[]; };
layout(binding = 2) readonly buffer V { CACHE_WORD v_cache[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) writeonly buffer Out { float o[]; };
layout(binding = 5) readonly buffer Seq { int seq[]; };
layout(binding = 6) readonly buffer Pages { int pages[]; };
layout(binding = 7) readonly buffer Sinks { float sinks[]; };  // [n_heads] when has_sinks, else a stand-in
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint head_dim_v; float scale; uint split_keys;
  uint page_size; uint pages_per_seq; uint window; uint has_sinks;
} pc;

const uint BR = 16;     // query rows per subgroup
const uint BC = 32;     // keys per block
const uint MAX_D = 128;
const uint KV = BC * (MAX_D / 4 + 2);  // f16vec4 per K (or V) tile: rows of D / 4 + 2
// K tile at [0, KV), V tile at [KV, 2 KV): fragment offsets and strides in f16vec4 units. Before the passes the
// whole array stages Q (at most 64 rows of 128 + 8: WARPS <= 4).
shared f16vec4 kv[2 * KV];
// The staging items per invocation of one K (or V) block: BC * D / 4 vec4 over the workgroup.
const uint WG = gl_WorkGroupSize.x;
const uint ITEMS = (BC * MAX_D / 4 + WG - 1) / WG;
const uint Q_ITEMS = (WARPS * 16 * MAX_D / 4 + WG - 1) / WG;  // Q's staged vec4 per invocation
shared float ss[WARPS * BR * BC];  // S per subgroup; at the end, its 16 x 16 output tile
shared float16_t ps[WARPS * BR * BC];
shared float row_alpha[WARPS * BR], row_l[WARPS * BR];
shared int row_pos[WARPS * BR], row_seq[WARPS * BR];  // -1 past n_tokens

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// Fragments are named variables (see matmul_coopmat.comp: arrays of fragments are slow on the H100 driver).
#define Q_LOAD(c) if (16 * c < D) coopMatLoad(qf##c, kv, w * BR * DP + 4 * c, DP, gl_CooperativeMatrixLayoutRowMajor);
#define QK(c, s)                                                                                            \
  if (16 * c < D) {                                                                                          \
    FRAG_B kf;                                                                                               \
    coopMatLoad(kf, kv, kc * 16 * DP + 4 * c, DP, gl_CooperativeMatrixLayoutColumnMajor);                    \
    s = coopMatMulAdd(qf##c, kf, s);                                                                         \
  }
// S = Q K^T for this block's 32 keys, into this subgroup's ss rows: per 16 keys two chains of multiply-adds (even
// and odd 16-column slices of D, added at the end), half the dependent latency of one chain.
#define SCORES()                                                                                             \
  [[unroll]] for (uint kc = 0; kc < BC / 16; ++kc) {                                                         \
    FRAG_C s = FRAG_C(0.0), s1 = FRAG_C(0.0);                                                                \
    QK(0, s) QK(1, s1) QK(2, s) QK(3, s1) QK(4, s) QK(5, s1) QK(6, s) QK(7, s1)                              \
    s += s1;                                                                                                 \
    coopMatStore(s, ss, w * BR * BC + kc * 16, BC, gl_CooperativeMatrixLayoutRowMajor);                      \
  }
// O slice c (columns 16c .. 16c + 15) += P V.
#define PV(c)                                                                                                \
  if (16 * c < D) {                                                                                          \
    FRAG_B v0, v1;                                                                                           \
    coopMatLoad(v0, kv, KV + 4 * c, DP, gl_CooperativeMatrixLayoutRowMajor);                                 \
    coopMatLoad(v1, kv, KV + 16 * DP + 4 * c, DP, gl_CooperativeMatrixLayoutRowMajor);                       \
    o##c = coopMatMulAdd(pf0, v0, o##c);                                                                     \
    o##c = coopMatMulAdd(pf1, v1, o##c);                                                                     \
  }
// Output slice c: O / l through this subgroup's 16 x 16 tile in ss.
#define STORE_O(c)                                                                                           \
  if (16 * c < D) {                                                                                          \
    coopMatStore(o##c, ss, w * BR * BC, 16, gl_CooperativeMatrixLayoutRowMajor);                             \
    sync_subgroup();                                                                                         \
    for (uint e = lane; e < 256; e += n_lanes) {                                                             \
      const uint r = e / 16, t = t0 + r0 + r;                                                                \
      if (t < pc.n_tokens) o[(t * pc.n_heads + h) * D + 16 * c + e % 16] = ss[w * BR * BC + e] / row_l[r0 + r]; \
    }                                                                                                        \
    sync_subgroup();                                                                                         \
  }

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// Staging item i (< BC * D4) of a block: element d4 of key j0 + kk, kk = i / D4, of the run's sequence; the block
// (j0 % BC == 0) lies on one page, whose first row for key j0 is block_row (block_row_of). kv_load issues the global load (the key clamped to the last one, kv_end >= 1; nothing uses
// the data, so nothing waits for it); KV_STAGE converts it into the tile after the block's multiply-adds, zero past
// the last key. Cache rows are `stride4` vec4 apart, this KV head's elements start at `head4`.
CACHE_VEC4 kv_load(bool is_v, uint i, uint j0, uint kv_end, uint block_row, uint D4, uint stride4, uint head4) {
  const uint kk = i / D4, row = block_row + min(kk, kv_end - 1u - j0);
  const uint at = row * stride4 + head4 + (i - kk * D4);
  return is_v ? CACHE_LOAD(v_cache, at) : CACHE_LOAD(k_cache, at);
}

// The cache row of key j0 (a block's first) of the sequence whose page-table row starts at page_base.
uint block_row_of(uint page_base, uint j0) { return uint(pages[page_base + j0 / PAGE_SIZE]) * PAGE_SIZE + j0 % PAGE_SIZE; }

// Staging loop bodies (it: a constant after unrolling, so kr / vr stay in registers).
#define KV_PREFETCH(j0, with_v)                                                                      \
  {                                                                                                  \
    const uint block_row = block_row_of(page_base, (j0));                                            \
    [[unroll]] for (uint it = 0; it < ITEMS; ++it)                                                   \
      if (tid + it * WG < BC * D4) {                                                                 \
        kr[it] = kv_load(false, tid + it * WG, (j0), kv_end, block_row, D4, kv_stride4, kv_head4);   \
        if (with_v) vr[it] = kv_load(true, tid + it * WG, (j0), kv_end, block_row, D4, kv_stride4, kv_head4); \
      }                                                                                              \
  }
#define KV_STAGE(j0, with_v)                                                                     \
  [[unroll]] for (uint it = 0; it < ITEMS; ++it) {                                               \
    const uint i = tid + it * WG, kk = i / D4, d4 = i - kk * D4;                                 \
    if (i < BC * D4) {                                                                           \
      const bool in_range = (j0) + kk < kv_end && (j0) + kk >= kv_begin;                                            \
      kv[kk * DP + d4] = in_range ? TO_F16VEC4(kr[it]) : f16vec4(0.0);                            \
      if (with_v) kv[KV + kk * DP + d4] = in_range ? TO_F16VEC4(vr[it]) : f16vec4(0.0);           \
    }                                                                                            \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint w = gl_SubgroupID, lane = gl_SubgroupInvocationID, n_lanes = gl_SubgroupSize;
  const uint D = pc.head_dim;  // == head_dim_v, checked by the host
  const uint D4 = D / 4, DP = D4 + 2, kv_stride4 = pc.n_kv_heads * D4;
  const uint rows = WARPS * BR;
  const uint n_blocks = (pc.n_tokens + rows - 1) / rows;
  const uint h = gl_WorkGroupID.x % pc.n_heads, t0 = (n_blocks - 1 - gl_WorkGroupID.x / pc.n_heads) * rows;
  const uint g = h / (pc.n_heads / pc.n_kv_heads);
  const uint r0 = w * BR;  // this subgroup's first row in the per-workgroup arrays

  // Stage Q (f16, through the K and V tiles) and set up the rows. Every load is issued before the first store, so
  // that an invocation's 16 loads overlap rather than wait one after another in a loop of load-then-store.
  vec4 qr[Q_ITEMS];
  [[unroll]] for (uint it = 0; it < Q_ITEMS; ++it) {
    const uint i = tid + it * WG, r = i / D4, d4 = i - r * D4, t = t0 + r;
    qr[it] = i < rows * D4 && t < pc.n_tokens ? q4[(t * pc.n_heads + h) * D4 + d4] : vec4(0.0);
  }
  [[unroll]] for (uint it = 0; it < Q_ITEMS; ++it) {
    const uint i = tid + it * WG, r = i / D4, d4 = i - r * D4;
    if (i < rows * D4) kv[r * DP + d4] = f16vec4(qr[it]);
  }
  for (uint r = tid; r < rows; r += WG) {
    const uint t = t0 + r;
    row_pos[r] = t < pc.n_tokens ? positions[t] : -1;
    row_seq[r] = t < pc.n_tokens ? seq[t] : -1;
  }
  barrier();
  FRAG_A qf0, qf1, qf2, qf3, qf4, qf5, qf6, qf7;
  Q_LOAD(0) Q_LOAD(1) Q_LOAD(2) Q_LOAD(3) Q_LOAD(4) Q_LOAD(5) Q_LOAD(6) Q_LOAD(7)
  const uint kv_head4 = g * D4;  // element d4 of key row j of this KV head: j * kv_stride4 + kv_head4 + d4
  barrier();  // Q is in registers before the K tile is overwritten

  // Softmax lanes: invocations 2r and 2r + 1 of the subgroup (at least 32 invocations, checked by the host) take
  // keys 0..15 and 16..31 of row r and combine with a shuffle.
  const bool softmax_lane = lane < 2 * BR;
  // Lanes past the first 32 (64-wide subgroups) alias rows 0..15 with every key masked and never write.
  const uint my_row = r0 + (lane / 2) % BR, my_half = lane % 2;
  const int my_pos = softmax_lane ? row_pos[my_row] : -1;

  CACHE_VEC4 kr[ITEMS], vr[ITEMS];  // the next block's cache elements as stored (kv_load)
  // Row ids: element i of any accumulator of this subgroup lies in row rid[i] (see the top).
  for (uint e = lane; e < 256; e += n_lanes) ss[w * BR * BC + e] = float(e / 16);
  sync_subgroup();
  FRAG_C rid;
  coopMatLoad(rid, ss, w * BR * BC, 16, gl_CooperativeMatrixLayoutRowMajor);
  sync_subgroup();  // read before the first block's S overwrites it

  FRAG_C o0 = FRAG_C(0.0), o1 = FRAG_C(0.0), o2 = FRAG_C(0.0), o3 = FRAG_C(0.0);
  FRAG_C o4 = FRAG_C(0.0), o5 = FRAG_C(0.0), o6 = FRAG_C(0.0), o7 = FRAG_C(0.0);
  // The softmax lanes' row maximum (both lanes of a row) and half-row sum; a sink starts the row's sum at 1 (once:
  // in the first lane of the row).
  float m = pc.has_sinks != 0 ? sinks[h] : -1.0 / 0.0;
  float l = pc.has_sinks != 0 && my_half == 0u ? 1.0 : 0.0;
  // The runs of rows of one sequence (see the top); row_seq is only read from here on, so every invocation finds
  // the same runs (the loop bounds are uniform). The rows in use are a prefix (-1 past n_tokens).
  for (uint run_begin = 0; run_begin < rows && row_seq[run_begin] >= 0;) {
    const int run_seq = row_seq[run_begin];
    uint run_end = run_begin + 1;
    int max_pos = row_pos[run_begin], min_pos = row_pos[run_begin];
    while (run_end < rows && row_seq[run_end] == run_seq) {
      max_pos = max(max_pos, row_pos[run_end]);
      min_pos = min(min_pos, row_pos[run_end++]);
    }
    const uint kv_end = uint(max_pos + 1);  // >= 1
    // The first key a row of the run sees, and its block (keys before it are neither staged nor scored).
    const uint kv_begin = pc.window > 0 && uint(min_pos) + 1u > pc.window ? uint(min_pos) + 1u - pc.window : 0u;
    const uint j_first = kv_begin / BC * BC;
    const uint page_base = uint(run_seq) * pc.pages_per_seq;
    // This lane's row position inside the run (its keys 0..my_pos), -1 outside it (every key masked).
    const int run_pos = my_row >= run_begin && my_row < run_end ? my_pos : -1;
    KV_PREFETCH(j_first, true)
    for (uint j0 = j_first; j0 < kv_end; j0 += BC) {
      KV_STAGE(j0, true)
      barrier();
      if (j0 + BC < kv_end) { KV_PREFETCH(j0 + BC, true) }
      SCORES()
      sync_subgroup();
      float sv[16];  // the row's 16 scaled scores of this lane (-inf where masked; all of them off the softmax lanes)
      float bm = -1.0 / 0.0;
      [[unroll]] for (uint i = 0; i < 16; ++i) {
        const uint kk = 16 * my_half + ((i + my_row) & 15u);
        const int j = int(j0 + kk);
        const bool seen = j <= run_pos && (pc.window == 0u || run_pos - j < int(pc.window));
        sv[i] = seen ? ss[my_row * BC + kk] * pc.scale : -1.0 / 0.0;
        bm = max(bm, sv[i]);
      }
      const float m_new = max(m, max(bm, subgroupShuffleXor(bm, 1)));
      // No key of the row so far (m_new = -inf): nothing to scale, every p is 0.
      const float base = m_new == -1.0 / 0.0 ? 0.0 : m_new;
      const float alpha = exp(m - base);
      if (softmax_lane) {
        float sum = 0.0;
        [[unroll]] for (uint i = 0; i < 16; ++i) {
          const uint kk = 16 * my_half + ((i + my_row) & 15u);
          const float p = exp(sv[i] - base);
          ps[my_row * BC + kk] = float16_t(p);
          sum += p;
        }
        l = l * alpha + sum;
        if (my_half == 0u) row_alpha[my_row] = alpha;
      }
      m = m_new;
      sync_subgroup();
      // O rows *= alpha (element i of every O fragment is in row rid[i]).
      [[unroll]] for (int i = 0; i < rid.length(); ++i) {
        const float a = row_alpha[r0 + uint(rid[i])];
        o0[i] *= a; o1[i] *= a; o2[i] *= a; o3[i] *= a; o4[i] *= a; o5[i] *= a; o6[i] *= a; o7[i] *= a;
      }
      FRAG_A pf0, pf1;
      coopMatLoad(pf0, ps, w * BR * BC, BC, gl_CooperativeMatrixLayoutRowMajor);
      coopMatLoad(pf1, ps, w * BR * BC + 16, BC, gl_CooperativeMatrixLayoutRowMajor);
      PV(0) PV(1) PV(2) PV(3) PV(4) PV(5) PV(6) PV(7)
      barrier();  // every subgroup is done with this block's K, V and P
    }
    run_begin = run_end;
  }
  l += subgroupShuffleXor(l, 1);
  if (softmax_lane && my_half == 0) row_l[my_row] = l;
  sync_subgroup();
  STORE_O(0) STORE_O(1) STORE_O(2) STORE_O(3) STORE_O(4) STORE_O(5) STORE_O(6) STORE_O(7)
}
