// Causal multi-head attention over the paged KV cache with grouped KV heads (GQA/MQA). Work item = (token, query
// head); for token t of page-table row s = seq[t] at position p and head h (KV head g = h / (n_heads / n_kv_heads)),
// key j of the sequence lives in cache row R(j) = page_table[s, j / page_size] * page_size + j % page_size:
//   s_j = scale * q[t,h,:] . k[R(j),g,:]           j = j0..p   (fp64; j0 = max(0, p - window + 1) with a window)
//   w_j = exp(s_j - m) / (sum exp(s - m) [+ exp(sink_h - m)])  m = max(s [, sink_h])    (fp64)
//   out[t,h,:] = sum_j w_j v[R(j),g,:]                          (fp64, stored fp32)
// Every work item reads only its own sequence's rows 0..p, in order, so prefilling n tokens at once, feeding them
// one by one, or running them beside other sequences in one step compute the same bits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "cpu/ops.h"
#include "engine/kv_q8.h"

namespace greta::cpu {

namespace {

// Element `index` of a cache, as double.
inline double cache_value(const CacheView& c, int64_t index) {
  switch (c.type) {
    case engine::ElemType::F16: return double(fp16_to_fp32(static_cast<const uint16_t*>(c.data)[index]));
    case engine::ElemType::Q8_0: return double(engine::kv_q8_value(static_cast<const uint32_t*>(c.data), index));
    default: return double(static_cast<const float*>(c.data)[index]);
  }
}

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a) {
  GRETA_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0);
  GRETA_CHECK(a.page_size > 0 && a.pages_per_seq > 0);
  int64_t max_len = 0;
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    GRETA_CHECK(a.positions[t] >= 0 && a.positions[t] < a.page_size * a.pages_per_seq, "position ", a.positions[t],
                " past the page table (", a.pages_per_seq, " pages of ", a.page_size, ")");
    GRETA_CHECK(a.seq[t] >= 0 && a.seq[t] < a.n_seqs, "sequence row ", a.seq[t], " of ", a.n_seqs);
    max_len = std::max<int64_t>(max_len, a.positions[t] + 1);
  }
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t k_stride = a.n_kv_heads * a.head_dim, v_stride = a.n_kv_heads * a.head_dim_v;

  pool.parallel_for(a.n_tokens * a.n_heads, [&](int64_t begin, int64_t end, int) {
    std::vector<double> weight(static_cast<size_t>(max_len));
    std::vector<int64_t> row(static_cast<size_t>(max_len));
    std::vector<double> acc(static_cast<size_t>(a.head_dim_v));
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / a.n_heads, h = th % a.n_heads, g = h / group;
      const int64_t p = a.positions[t];
      const int64_t j0 = a.window > 0 ? std::max<int64_t>(0, p - a.window + 1) : 0, len = p + 1;
      const int32_t* pages = a.page_table + int64_t(a.seq[t]) * a.pages_per_seq;
      for (int64_t j = j0; j < len; ++j) {
        row[size_t(j)] = int64_t(pages[j / a.page_size]) * a.page_size + j % a.page_size;
        GRETA_CHECK(row[size_t(j)] >= 0 && row[size_t(j)] < a.k_cache.rows, "KV row ", row[size_t(j)], " outside ",
                    a.k_cache.rows);
      }
      const float* q = a.q + th * a.head_dim;
      double max_score = a.sinks ? double(a.sinks[h]) : -INFINITY;
      for (int64_t j = j0; j < len; ++j) {
        const int64_t kb = row[size_t(j)] * k_stride + g * a.head_dim;
        double dot = 0;
        for (int64_t i = 0; i < a.head_dim; ++i) dot += double(q[i]) * cache_value(a.k_cache, kb + i);
        weight[size_t(j)] = dot * double(a.scale);
        max_score = std::max(max_score, weight[size_t(j)]);
      }
      double sum = a.sinks ? std::exp(double(a.sinks[h]) - max_score) : 0.0;
      for (int64_t j = j0; j < len; ++j) sum += (weight[size_t(j)] = std::exp(weight[size_t(j)] - max_score));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = j0; j < len; ++j) {
        const int64_t vb = row[size_t(j)] * v_stride + g * a.head_dim_v;
        const double w = weight[size_t(j)];
        for (int64_t i = 0; i < a.head_dim_v; ++i) acc[size_t(i)] += w * cache_value(a.v_cache, vb + i);
      }
      float* out = a.out + th * a.head_dim_v;
      for (int64_t i = 0; i < a.head_dim_v; ++i) out[i] = float(acc[size_t(i)] / sum);
    }
  });
}

}  // namespace greta::cpu
