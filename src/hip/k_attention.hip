// Attention kernels of the HIP backend, over the paged KV cache (kernels.h: AttentionArgs), f32, f16 or q8_0 caches
// (the kernels are templates on the cache accessor KC of kv_cache.h: KvF32, KvF16, KvQ8; values are converted to fp32
// exactly on load, q8_0 as d * q).
//
// attention_decode (fp32, any head size, used for decode and small batches): split-K ("flash decoding"). Grid
// (n_heads, n_tokens, n_splits); split s of row (t, h) handles keys [j0 + s * chunk, j0 + (s + 1) * chunk) of
// j0..positions[t] of token t's sequence (j0 = 0, or the window's first key) with an online softmax over tiles of kDecodeThreads keys (one key per thread for the scores,
// whose cache row it also looks up in the page table and leaves in LDS for P V; one output dimension per thread for
// P V), and writes its partial (max m, sum l, unnormalized O) to `partials`. attention_combine merges the splits:
// out = sum_s e^(m_s - M) O_s / (sum_s e^(m_s - M) l_s [+ e^(sink - M)]), M = max(m_s [, sink]): an attention sink
// joins here only, as one more logit with no value row. The number of splits depends only on the plan's longest key
// range (AttentionArgs::max_keys: pages_per_seq * page_size, or the sliding window), so the grid is fixed per plan
// and a captured graph stays valid whatever the step's positions (splits past a token's keys write an empty
// partial). Every (t, h) is independent, so tokens of different sequences mix freely.
//
// attention_prefill (matrix cores): flash attention, one wave per 16 query tokens of one head; the tile's rows may
// span several sequences (a loop over the runs of rows of one sequence); sliding windows skip the key tiles before
// every row's window; sinks start each row's softmax state: see attn_tile.h.
#include <cmath>

#include "hip/attn_tile.h"
#include "hip/launch_util.h"

namespace greta::hip {
namespace {

constexpr int kDecodeThreads = 256;
constexpr int kKeysPerSplit = 256;
constexpr int kMaxSplits = 64;

// Token t's position clamped to [-1, max_len) and sequence row to [0, n_seqs) (see AttentionArgs).
__device__ GRETA_INLINE int64_t clamped_pos(const AttentionArgs& a, int64_t t) {
  const int64_t p = a.positions[t];
  return p < 0 ? -1 : (p >= a.max_len() ? a.max_len() - 1 : p);
}
__device__ GRETA_INLINE int64_t clamped_seq(const AttentionArgs& a, int64_t t) {
  const int64_t s = a.seq[t];
  return s < 0 ? 0 : (s >= a.n_seqs ? a.n_seqs - 1 : s);
}

// partials layout per (t, h, s): [m, l, O[0..dv)]
template <class KC>
__global__ void __launch_bounds__(kDecodeThreads) attention_decode_kernel(AttentionArgs a, int n_splits, int64_t chunk,
                                                                          float* partials) {
  // q[head_dim] | p[kDecodeThreads] | scratch[kDecodeThreads / 32] | rows[kDecodeThreads] (int: the tile's cache rows)
  extern __shared__ float smem[];
  float* q_s = smem;
  float* p_s = q_s + a.head_dim;
  float* red = p_s + kDecodeThreads;
  int* row_s = reinterpret_cast<int*>(red + kDecodeThreads / 32);
  const int64_t h = blockIdx.x, t = blockIdx.y, s = blockIdx.z;
  const int tid = thread_id();
  const int64_t group = a.n_heads / a.n_kv_heads, g = h / group;
  const int64_t pos = clamped_pos(a, t);
  const int32_t* pages = a.page_table + clamped_seq(a, t) * a.pages_per_seq;
  // Keys first..pos, `first` the window's first key (pos - first + 1 <= max_keys() <= n_splits * chunk: every key is
  // covered by a split).
  const int64_t first = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  const int64_t begin = first + s * chunk;
  const int64_t end = first + (s + 1) * chunk < pos + 1 ? first + (s + 1) * chunk : pos + 1;
  float* part = partials + ((t * a.n_heads + h) * n_splits + s) * (a.head_dim_v + 2);

  const float* q = a.q + (t * a.n_heads + h) * a.head_dim;
  for (int64_t d = tid; d < a.head_dim; d += kDecodeThreads) q_s[d] = q[d];
  __syncthreads();

  // Element d of key row r of KV head g: flat index r * k_stride + g * head_dim + d (likewise V).
  const KC k_cache{static_cast<decltype(KC::p)>(a.k_cache)}, v_cache{static_cast<decltype(KC::p)>(a.v_cache)};
  const int64_t k_stride = a.n_kv_heads * a.head_dim, v_stride = a.n_kv_heads * a.head_dim_v;
  const int64_t k_base = g * a.head_dim, v_base = g * a.head_dim_v;
  float m = -INFINITY, l = 0.f;
  // Each thread accumulates output dimensions tid, tid + kDecodeThreads, ... (at most 2: head_dim_v <= 512).
  float o[2] = {0.f, 0.f};
  for (int64_t j0 = begin; j0 < end; j0 += kDecodeThreads) {
    const int64_t j = j0 + tid;
    // Key j's cache row; a row outside the cache (bad step input) scores -inf and reads row 0 for V with P = 0.
    const int row = fa::key_row(pages, a.page_size, j, end, a.cache_rows);
    row_s[tid] = row < 0 ? 0 : row;
    float score = -INFINITY;
    if (row >= 0) score = k_cache.row_dot(q_s, int64_t(row) * k_stride + k_base, a.head_dim) * a.scale;
    // tile max
    float mx = wave_max(score);
    if (lane_id() == 0) red[wave_id()] = mx;
    __syncthreads();
    for (int w = 0; w < kDecodeThreads / kWave; ++w) mx = fmaxf(mx, red[w]);
    __syncthreads();
    const float m_new = fmaxf(m, mx);
    const float alpha = m == -INFINITY ? 0.f : expf(m - m_new);
    const float p = score == -INFINITY ? 0.f : expf(score - m_new);
    p_s[tid] = p;
    float psum = wave_sum(p);
    if (lane_id() == 0) red[wave_id()] = psum;
    __syncthreads();
    psum = 0.f;
    for (int w = 0; w < kDecodeThreads / kWave; ++w) psum += red[w];
    l = l * alpha + psum;
    m = m_new;
    const int64_t n_keys = end - j0 < kDecodeThreads ? end - j0 : kDecodeThreads;
    for (int c = 0; c < 2; ++c) {
      const int64_t d = tid + int64_t(c) * kDecodeThreads;
      if (d >= a.head_dim_v) break;
      float acc = o[c] * alpha;
      for (int64_t jj = 0; jj < n_keys; ++jj) acc += p_s[jj] * v_cache.at(int64_t(row_s[jj]) * v_stride + v_base + d);
      o[c] = acc;
    }
    __syncthreads();
  }
  if (tid == 0) part[0] = m, part[1] = l;
  for (int c = 0; c < 2; ++c) {
    const int64_t d = tid + int64_t(c) * kDecodeThreads;
    if (d < a.head_dim_v) part[2 + d] = o[c];
  }
}

__global__ void __launch_bounds__(kDecodeThreads) attention_combine_kernel(AttentionArgs a, int n_splits,
                                                                           const float* partials) {
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const float* part = partials + (t * a.n_heads + h) * n_splits * (a.head_dim_v + 2);
  float mx = a.sinks ? a.sinks[h] : -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, part[s * (a.head_dim_v + 2)]);
  float* out = a.out + (t * a.n_heads + h) * a.head_dim_v;
  const float sink_weight = a.sinks && mx != -INFINITY ? expf(a.sinks[h] - mx) : 0.f;
  for (int64_t d = threadIdx.x; d < a.head_dim_v; d += kDecodeThreads) {
    float num = 0.f, den = sink_weight;
    for (int s = 0; s < n_splits; ++s) {
      const float* p = part + s * (a.head_dim_v + 2);
      if (p[0] == -INFINITY) continue;
      const float w = expf(p[0] - mx);
      num += w * p[2 + d];
      den += w * p[1];
    }
    out[d] = den > 0.f ? num / den : 0.f;
  }
}

// Flash attention for prefill; CHUNKS = head_dim_v padded to 16, in units of 16 (<= fa::kMaxDvChunks); KC = the
// cache accessor (kv_cache.h).
template <int CHUNKS, class KC>
__global__ void attention_prefill_kernel(AttentionArgs a) {
#if defined(GRETA_HAVE_MMA)
  static_assert(Mma::kLanes == kWave, "matrix instruction and wave size disagree");
  // s | m | l | alpha | pos (int) | seq (int) | key rows (int, kBKV) | q | k | v | p (fp16)
  extern __shared__ float smem[];
  const fa::Dims dims = fa::make_dims(int(a.head_dim), int(a.head_dim_v));
  float* lds_s = smem;
  float* row_m = lds_s + fa::kBQ * dims.lds;
  float* row_l = row_m + fa::kBQ;
  float* row_alpha = row_l + fa::kBQ;
  int* row_pos = reinterpret_cast<int*>(row_alpha + fa::kBQ);
  int* row_seq = row_pos + fa::kBQ;
  int* key_rows = row_seq + fa::kBQ;
  half_t* lds_q = reinterpret_cast<half_t*>(key_rows + fa::kBKV);
  half_t* lds_k = lds_q + fa::kBQ * dims.ldq;
  half_t* lds_v = lds_k + fa::kBKV * dims.ldk;
  half_t* lds_p = lds_v + fa::kBKV * dims.ldv;

  const int lane = lane_id();
  const int64_t t0 = int64_t(blockIdx.x) * fa::kBQ, h = blockIdx.y;
  const int64_t g = h / (a.n_heads / a.n_kv_heads);
  const int rows_valid = a.n_tokens - t0 < fa::kBQ ? int(a.n_tokens - t0) : fa::kBQ;
  if (lane < fa::kBQ) {
    row_pos[lane] = lane < rows_valid ? int(clamped_pos(a, t0 + lane)) : -1;
    row_seq[lane] = lane < rows_valid ? int(clamped_seq(a, t0 + lane)) : -1;
    fa::init_row(lane, a.sinks ? a.sinks + h : nullptr, row_m, row_l);
  }
  fa::stage_q(lane, kWave, a.q + (t0 * a.n_heads + h) * a.head_dim, a.n_heads * a.head_dim, rows_valid, dims, lds_q);
  block_barrier();

  float acc_o[CHUNKS][Mma::kC];
  for (int c = 0; c < CHUNKS; ++c)
    for (int i = 0; i < Mma::kC; ++i) acc_o[c][i] = 0.f;
  const KC k_cache{static_cast<decltype(KC::p)>(a.k_cache)}, v_cache{static_cast<decltype(KC::p)>(a.v_cache)};
  const int64_t k_stride = a.n_kv_heads * a.head_dim, v_stride = a.n_kv_heads * a.head_dim_v;
  const int64_t k_base = g * a.head_dim, v_base = g * a.head_dim_v;
  // One pass per run of rows [r0, r1) of one sequence (uniform across the wave: every lane reads the same LDS).
  for (int r0 = 0; r0 < rows_valid;) {
    int max_pos = -1;
    const int r1 = fa::run_end(row_seq, row_pos, r0, rows_valid, &max_pos);
    const int64_t kv_len = max_pos + 1;
    const int32_t* pages = a.page_table + int64_t(row_seq[r0]) * a.pages_per_seq;
    for (int64_t j0 = fa::run_key_begin(row_pos, r0, r1, a.window); j0 < kv_len; j0 += fa::kBKV) {
      if (lane < fa::kBKV) key_rows[lane] = fa::key_row(pages, a.page_size, j0 + lane, kv_len, a.cache_rows);
      block_barrier();
      fa::stage_kv(lane, kWave, k_cache, k_base, k_stride, v_cache, v_base, v_stride, key_rows, dims, lds_k,
                   lds_v);
      block_barrier();
      float acc_s[Mma::kC];
      for (int i = 0; i < Mma::kC; ++i) acc_s[i] = 0.f;
      fa::for_each_score_mma<Mma>(lane, lds_q, lds_k, dims,
                                  [&](const half_t* af, const half_t* bf) { mma_16x16x16(af, bf, acc_s); });
      fa::store_scores<Mma>(lane, acc_s, a.scale, j0, row_pos, r0, r1, dims, lds_s, a.window);
      block_barrier();
      if (lane < fa::kBQ) fa::softmax_row(lane, lds_s, dims, lds_p, row_m, row_l, row_alpha);
      block_barrier();
      fa::rescale_o<Mma>(lane, CHUNKS, acc_o, row_alpha);
      fa::for_each_pv_mma<Mma>(lane, lds_p, lds_v, dims, [&](int c, const half_t* af, const half_t* bf) {
        if (c < CHUNKS) mma_16x16x16(af, bf, acc_o[c]);
      });
      block_barrier();
    }
    r0 = r1;
  }
  fa::store_out<Mma>(lane, CHUNKS, acc_o, row_l, a.out + (t0 * a.n_heads + h) * a.head_dim_v,
                     a.n_heads * a.head_dim_v, rows_valid, dims);
#endif
}

size_t prefill_smem_bytes(const fa::Dims& d) {
  return sizeof(float) * (fa::kBQ * d.lds + 5 * fa::kBQ + fa::kBKV) + sizeof(half_t) * size_t(fa::lds_elems(d));
}

}  // namespace

int attention_splits(int64_t max_len) {
  const int64_t s = (max_len + kKeysPerSplit - 1) / kKeysPerSplit;
  return int(s < 1 ? 1 : (s > kMaxSplits ? kMaxSplits : s));
}

int64_t attention_partials_elems(const AttentionArgs& a, int n_splits) {
  return a.n_tokens * a.n_heads * int64_t(n_splits) * (a.head_dim_v + 2);
}

namespace {
void check_args(const AttentionArgs& a) {
  GRETA_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0 && a.n_seqs > 0 && a.page_size > 0 &&
              a.pages_per_seq > 0 && a.cache_rows > 0 && a.cache_rows < (int64_t(1) << 31));
}
}  // namespace

void launch_attention_decode(const LaunchCtx& c, const AttentionArgs& a, float* partials) {
  check_args(a);
  GRETA_CHECK(a.head_dim_v <= 2 * kDecodeThreads);
  GRETA_CHECK(a.n_tokens < 65536 && a.n_heads < 65536);
  if (a.n_tokens <= 0) return;
  const int n_splits = attention_splits(a.max_keys());
  const int64_t chunk = (a.max_keys() + n_splits - 1) / n_splits;
  const size_t smem = sizeof(float) * size_t(a.head_dim + kDecodeThreads + kDecodeThreads / 32) +
                      sizeof(int) * size_t(kDecodeThreads);
  const dim3 grid(unsigned(a.n_heads), unsigned(a.n_tokens), unsigned(n_splits));
  switch (a.cache) {
    case KvType::F32:
      attention_decode_kernel<KvF32><<<grid, kDecodeThreads, smem, stream_of(c)>>>(a, n_splits, chunk, partials);
      break;
    case KvType::F16:
      attention_decode_kernel<KvF16><<<grid, kDecodeThreads, smem, stream_of(c)>>>(a, n_splits, chunk, partials);
      break;
    case KvType::Q8_0:
      attention_decode_kernel<KvQ8><<<grid, kDecodeThreads, smem, stream_of(c)>>>(a, n_splits, chunk, partials);
      break;
  }
  check_launch("attention_decode");
  attention_combine_kernel<<<dim3(unsigned(a.n_heads), unsigned(a.n_tokens)), kDecodeThreads, 0, stream_of(c)>>>(
      a, n_splits, partials);
  check_launch("attention_combine");
}

bool attention_prefill_supported(const LaunchCtx& c, const AttentionArgs& a) {
  return c.mma && a.head_dim <= 256 && a.head_dim_v <= 256 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0 &&
         prefill_smem_bytes(fa::make_dims(int(a.head_dim), int(a.head_dim_v))) <= 48 * 1024;
}

namespace {
template <class KC>
void launch_prefill_typed(const LaunchCtx& c, const AttentionArgs& a, dim3 grid, unsigned threads, size_t smem,
                          int chunks) {
  if (chunks <= 2)
    attention_prefill_kernel<2, KC><<<grid, threads, smem, stream_of(c)>>>(a);
  else if (chunks <= 4)
    attention_prefill_kernel<4, KC><<<grid, threads, smem, stream_of(c)>>>(a);
  else if (chunks <= 8)
    attention_prefill_kernel<8, KC><<<grid, threads, smem, stream_of(c)>>>(a);
  else
    attention_prefill_kernel<16, KC><<<grid, threads, smem, stream_of(c)>>>(a);
}
}  // namespace

void launch_attention_prefill(const LaunchCtx& c, const AttentionArgs& a) {
  GRETA_CHECK(attention_prefill_supported(c, a));
  check_args(a);
  if (a.n_tokens <= 0) return;
  const fa::Dims d = fa::make_dims(int(a.head_dim), int(a.head_dim_v));
  const size_t smem = prefill_smem_bytes(d);
  const dim3 grid(blocks_for(a.n_tokens, fa::kBQ), unsigned(a.n_heads));
  const unsigned threads = unsigned(c.wave);
  const int chunks = d.dvp / 16;
  switch (a.cache) {
    case KvType::F32: launch_prefill_typed<KvF32>(c, a, grid, threads, smem, chunks); break;
    case KvType::F16: launch_prefill_typed<KvF16>(c, a, grid, threads, smem, chunks); break;
    case KvType::Q8_0: launch_prefill_typed<KvQ8>(c, a, grid, threads, smem, chunks); break;
  }
  check_launch("attention_prefill");
}

}  // namespace greta::hip
