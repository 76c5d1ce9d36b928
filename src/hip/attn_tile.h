// Flash attention for prefill on matrix cores: the tile math shared by the kernel (k_attention.hip) and the CPU
// layout tests (tests/hip).
//
// One block = one wave computes kBQ = 16 consecutive query tokens of one head h (KV head g = h / group) over the
// paged KV cache (kernels.h: AttentionArgs), with an online softmax (fp32 statistics per row):
//   stage_q once: Q rows -> LDS q[r][d] fp16 ("mk": A of S = Q K^T), head_dim padded with zeros to a multiple of 16
//   for each run of rows of one sequence (the tile's tokens may belong to several sequences: prefill chunks of some
//   and decode tokens of others share a step; the engine keeps each sequence's tokens consecutive, so a sequence is
//   one run of rows [r_begin, r_end)), over that sequence's keys in tiles of kBKV = 16:
//     key_row: the cache rows of keys j0 .. j0 + 15 through the sequence's page table (-1 past the run's longest
//       position: zeros are staged)
//     stage_kv: K rows -> k[j][d] ("nk": B[d][j] = K[j][d]), V rows -> v[j][d] ("kn": B[j][d] = V[j][d]); the cache
//       is f32, f16 or q8_0, read through kv_cache.h's accessors (q8_0 dequantized to d * q while staging)
//     S = Q K^T over head_dim in steps of 16 (for_each_score_mma), stored to s[r][j] times `scale`, with -inf for
//       rows outside the run and where key j0 + j > position of row r (store_scores: the causal mask)
//     softmax_row (lanes 0..15, one row each): new running max, rescale factor alpha, P = exp(S - max) -> p[r][j]
//       (fp16, "mk": A of O += P V), running sum l += the stored P values. A row outside the run sees only -inf:
//       alpha = 1 and P = 0, so its state passes through the other runs unchanged (exactly: e^0 = 1)
//     rescale_o: O *= alpha[row]; O += P V for each 16-wide chunk of head_dim_v (for_each_pv_mma)
//   store_out: out = O / l (fp32), rows of real tokens only.
// With one sequence in the tile (plain prefill) there is one run and this is the classic flash-attention loop.
// Positions and sequences come from the step-input buffers, so rows attend exactly to their sequence's keys
// 0..positions[t] as the CPU does.
// Sliding window (window > 0): row r sees key j only when pos_r - j < window (store_scores masks the rest), and a
// run's key loop starts at the tile holding its lowest visible key (run_key_begin), so key tiles wholly before every
// row's window are never staged. Sinks: init_row starts row r's running state at (m, l) = (sink, e^0 = 1), as if the
// sink were a key with a zero value row; the online softmax then rescales it like any other key, so the final O / l
// has the sink in its maximum and denominator only.
#pragma once
#include <cstdint>

#include "hip/gemm_tile.h"
#include "hip/kv_cache.h"
#include "hip/mma_layout.h"

namespace greta::hip::fa {

inline constexpr int kBQ = 16, kBKV = 16;
inline constexpr int kMaxDvChunks = 16;  // head_dim_v <= 256
inline constexpr float kNegInf = -__builtin_huge_valf();

using gemm::get;
using gemm::put;

struct Dims {
  int d = 0, dv = 0;    // head_dim, head_dim_v
  int dp = 0, dvp = 0;  // padded to multiples of 16
  int ldq = 0, ldk = 0, ldv = 0, ldp = 0, lds = 0;
};
GRETA_HD GRETA_INLINE Dims make_dims(int head_dim, int head_dim_v) {
  Dims t;
  t.d = head_dim;
  t.dv = head_dim_v;
  t.dp = (head_dim + 15) / 16 * 16;
  t.dvp = (head_dim_v + 15) / 16 * 16;
  t.ldq = t.ldk = t.dp + 8;  // +8 halves: rows start in different LDS banks
  t.ldv = t.dvp + 8;
  t.ldp = kBKV + 8;
  t.lds = kBKV + 1;
  return t;
}
// LDS elements (T) needed by q, k, v and p; the float arrays (s, m, l, alpha), the rows' positions and sequences and
// the key tile's cache rows come on top.
GRETA_HD GRETA_INLINE int lds_elems(const Dims& t) { return kBQ * t.ldq + kBKV * t.ldk + kBKV * t.ldv + kBQ * t.ldp; }

// Q rows r < rows_valid of this block: q_base + r * q_stride (fp32, head_dim values); other rows and pad are zero.
template <class T>
GRETA_HD GRETA_INLINE void stage_q(int tid, int nthreads, const float* q_base, int64_t q_stride, int rows_valid,
                                   const Dims& t, T* lds_q) {
  for (int e = tid; e < kBQ * t.dp; e += nthreads) {
    const int r = e / t.dp, d = e % t.dp;
    put(lds_q[r * t.ldq + d], r < rows_valid && d < t.d ? q_base[r * q_stride + d] : 0.f);
  }
}

// The run of rows that starts at r0 (< rows_valid): rows r0 .. end - 1 have row_seq[r0]; returns end and sets
// *max_pos to the largest position among them (the run's key range is 0..*max_pos).
GRETA_HD GRETA_INLINE int run_end(const int* row_seq, const int* row_pos, int r0, int rows_valid, int* max_pos) {
  int r1 = r0 + 1, mp = row_pos[r0];
  for (; r1 < rows_valid && row_seq[r1] == row_seq[r0]; ++r1) mp = row_pos[r1] > mp ? row_pos[r1] : mp;
  *max_pos = mp;
  return r1;
}

// The first key (a multiple of kBKV) any row of the run [r0, r1) can see: 0, or with a sliding window the tile of
// max(0, min position - window + 1).
GRETA_HD GRETA_INLINE int64_t run_key_begin(const int* row_pos, int r0, int r1, int64_t window) {
  if (window <= 0) return 0;
  int mn = row_pos[r0];
  for (int r = r0 + 1; r < r1; ++r) mn = row_pos[r] < mn ? row_pos[r] : mn;
  const int64_t first = int64_t(mn) - window + 1;
  return first <= 0 ? 0 : first / kBKV * kBKV;
}

// Row r's running softmax state before any key: (-inf, 0), or with a sink logit (sink, 1) (see the top).
GRETA_HD GRETA_INLINE void init_row(int r, const float* sink, float* row_m, float* row_l) {
  row_m[r] = sink ? *sink : kNegInf;
  row_l[r] = sink ? 1.f : 0.f;
}

// The cache row of key j of a sequence whose page-table row is `pages`, or -1 when j >= kv_len or the page table
// points outside the cache (a bad step input reads zeros, never out of bounds).
GRETA_HD GRETA_INLINE int key_row(const int32_t* pages, int64_t page_size, int64_t j, int64_t kv_len,
                                  int64_t cache_rows) {
  if (j >= kv_len) return -1;
  const int64_t row = int64_t(pages[j / page_size]) * page_size + j % page_size;
  return row >= 0 && row < cache_rows ? int(row) : -1;
}

// Keys j = 0..15 of the current key tile of one KV head: cache row key_rows[j] (-1: staged as zeros), element d at
// flat index k_base + row * k_stride + d of the cache accessor k (kv_cache.h: KvF32, KvF16 or KvQ8; values come out
// in fp32 exactly, an f16 cache is staged without rounding, a q8_0 one as d * q rounded once to the LDS type).
template <class T, class KC>
GRETA_HD GRETA_INLINE void stage_kv(int tid, int nthreads, const KC& k, int64_t k_base, int64_t k_stride, const KC& v,
                                    int64_t v_base, int64_t v_stride, const int* key_rows, const Dims& t, T* lds_k,
                                    T* lds_v) {
  for (int e = tid; e < kBKV * t.dp; e += nthreads) {
    const int j = e / t.dp, d = e % t.dp;
    const int64_t row = key_rows[j];
    put(lds_k[j * t.ldk + d], row >= 0 && d < t.d ? k.at(k_base + row * k_stride + d) : 0.f);
  }
  for (int e = tid; e < kBKV * t.dvp; e += nthreads) {
    const int j = e / t.dvp, d = e % t.dvp;
    const int64_t row = key_rows[j];
    put(lds_v[j * t.ldv + d], row >= 0 && d < t.dv ? v.at(v_base + row * v_stride + d) : 0.f);
  }
}

// S = Q K^T: fn(a_frag, b_frag) for each 16-wide step of head_dim.
template <class M, class T, class Fn>
GRETA_HD GRETA_INLINE void for_each_score_mma(int lane, const T* lds_q, const T* lds_k, const Dims& t, Fn&& fn) {
  for (int d0 = 0; d0 < t.dp; d0 += 16) {
    T af[M::kA], bf[M::kB];
    load_a_mk<M>(lane, lds_q, t.ldq, 0, d0, af);
    load_b_nk<M>(lane, lds_k, t.ldk, 0, d0, bf);
    fn(af, bf);
  }
}

// The lane's score fragment -> s[r][j] * scale, or -inf for rows outside the run [r_begin, r_end), where key
// j0 + j is beyond row r's position, and (window > 0) where it is window or more positions before it.
template <class M>
GRETA_HD GRETA_INLINE void store_scores(int lane, const float* acc, float scale, int64_t j0, const int* row_pos,
                                        int r_begin, int r_end, const Dims& t, float* lds_s, int64_t window = 0) {
  for (int i = 0; i < M::kC; ++i) {
    const RowCol rc = M::c(lane, i);
    const int64_t j = j0 + rc.col;
    const bool visible = rc.row >= r_begin && rc.row < r_end && j <= row_pos[rc.row] &&
                         (window <= 0 || row_pos[rc.row] - j < window);
    lds_s[rc.row * t.lds + rc.col] = visible ? acc[i] * scale : kNegInf;
  }
}

// Online softmax for row r (one lane per row): updates the running max m and sum l, writes P and alpha.
template <class T>
GRETA_HD GRETA_INLINE void softmax_row(int r, const float* lds_s, const Dims& t, T* lds_p, float* row_m, float* row_l,
                                       float* row_alpha) {
  const float* s = lds_s + r * t.lds;
  float mx = kNegInf;
  for (int j = 0; j < kBKV; ++j) mx = s[j] > mx ? s[j] : mx;
  const float m_old = row_m[r], m_new = mx > m_old ? mx : m_old;
  if (m_new == kNegInf) {  // nothing visible to this row yet (a later run's row, or a row past the tokens)
    row_alpha[r] = 1.f;
    for (int j = 0; j < kBKV; ++j) put(lds_p[r * t.ldp + j], 0.f);
    return;
  }
  const float alpha = m_old == kNegInf ? 0.f : expf(m_old - m_new);
  float sum = 0.f;
  for (int j = 0; j < kBKV; ++j) {
    T& p = lds_p[r * t.ldp + j];
    put(p, s[j] == kNegInf ? 0.f : expf(s[j] - m_new));
    sum += get(p);  // the rounded value that P V uses
  }
  row_m[r] = m_new;
  row_l[r] = row_l[r] * alpha + sum;
  row_alpha[r] = alpha;
}

// O *= alpha of each accumulator element's row. acc_o[c] is the fragment of head_dim_v chunk c.
template <class M>
GRETA_HD GRETA_INLINE void rescale_o(int lane, int chunks, float (*acc_o)[M::kC], const float* row_alpha) {
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < M::kC; ++i) acc_o[c][i] *= row_alpha[M::c(lane, i).row];
}

// O += P V: fn(c, a_frag, b_frag) for each 16-wide chunk c of head_dim_v (P's fragment is loaded once).
template <class M, class T, class Fn>
GRETA_HD GRETA_INLINE void for_each_pv_mma(int lane, const T* lds_p, const T* lds_v, const Dims& t, Fn&& fn) {
  T af[M::kA];
  load_a_mk<M>(lane, lds_p, t.ldp, 0, 0, af);
  for (int c = 0; c < t.dvp / 16; ++c) {
    T bf[M::kB];
    load_b_kn<M>(lane, lds_v, t.ldv, 0, 16 * c, bf);
    fn(c, af, bf);
  }
}

// out row r (r < rows_valid) at out_base + r * out_stride: O / l for dimensions < head_dim_v.
template <class M>
GRETA_HD GRETA_INLINE void store_out(int lane, int chunks, const float (*acc_o)[M::kC], const float* row_l,
                                     float* out_base, int64_t out_stride, int rows_valid, const Dims& t) {
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < M::kC; ++i) {
      const RowCol rc = M::c(lane, i);
      const int d = 16 * c + rc.col;
      if (rc.row < rows_valid && d < t.dv && row_l[rc.row] > 0.f)
        out_base[rc.row * out_stride + d] = acc_o[c][i] / row_l[rc.row];
    }
}

}  // namespace greta::hip::fa
