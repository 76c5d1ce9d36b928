// Causal multi-head attention over the KV cache with grouped KV heads (GQA/MQA). Work item = (token, query head);
// for token t at position p and head h (KV head g = h / (n_heads / n_kv_heads)):
//   s_j = scale * q[t,h,:] . k[j,g,:]              j = 0..p    (fp64)
//   w_j = exp(s_j - max s) / sum exp(s - max s)                 (fp64)
//   out[t,h,:] = sum_j w_j v[j,g,:]                             (fp64, stored fp32)
// Every work item reads only cache rows 0..p, so prefilling n tokens at once and feeding them one by one compute
// the same numbers.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "cpu/ops.h"

namespace greta::cpu {

void attention(ThreadPool& pool, const AttentionArgs& a) {
  GRETA_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0);
  int64_t max_len = 0;
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    GRETA_CHECK(a.positions[t] >= 0 && a.positions[t] < a.ctx, "position ", a.positions[t], " of ctx ", a.ctx);
    max_len = std::max<int64_t>(max_len, a.positions[t] + 1);
  }
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t k_stride = a.n_kv_heads * a.head_dim, v_stride = a.n_kv_heads * a.head_dim_v;

  pool.parallel_for(a.n_tokens * a.n_heads, [&](int64_t begin, int64_t end, int) {
    std::vector<double> weight(static_cast<size_t>(max_len));
    std::vector<double> acc(static_cast<size_t>(a.head_dim_v));
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / a.n_heads, h = th % a.n_heads, g = h / group;
      const int64_t len = int64_t(a.positions[t]) + 1;
      const float* q = a.q + th * a.head_dim;
      double max_score = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        const float* k = a.k_cache + j * k_stride + g * a.head_dim;
        double dot = 0;
        for (int64_t i = 0; i < a.head_dim; ++i) dot += double(q[i]) * double(k[i]);
        weight[size_t(j)] = dot * double(a.scale);
        max_score = std::max(max_score, weight[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < len; ++j) sum += (weight[size_t(j)] = std::exp(weight[size_t(j)] - max_score));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < len; ++j) {
        const float* v = a.v_cache + j * v_stride + g * a.head_dim_v;
        const double w = weight[size_t(j)];
        for (int64_t i = 0; i < a.head_dim_v; ++i) acc[size_t(i)] += w * double(v[i]);
      }
      float* out = a.out + th * a.head_dim_v;
      for (int64_t i = 0; i < a.head_dim_v; ++i) out[i] = float(acc[size_t(i)] / sum);
    }
  });
}

}  // namespace greta::cpu
