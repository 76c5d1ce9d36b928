// Mixture of experts (engine::MoeRouteOp, MoeMatMulOp, MoeCombineOp).
// Routing: per token, the k experts of largest router logit (ties: the lower id), in that order; their weights are
// the softmax probabilities over all experts (SoftmaxTopK, optionally divided by their sum) or the softmax over the
// k chosen logits (TopKSoftmax). Softmax in fp64.
// Expert matmuls: slot (t, s) multiplies its input row by expert experts[t, s]'s rows of the 3-D weight, with the
// same dot product as the dense matmul, so an expert's output does not depend on which other tokens chose it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "cpu/ops.h"
#include "model/quants.h"

namespace greta::cpu {

void moe_route(ThreadPool& pool, const float* logits, int32_t* experts, float* weights, int64_t n_tokens,
               int64_t n_experts, int64_t k, engine::MoeGating gating, bool normalize) {
  GRETA_CHECK(k >= 1 && k <= n_experts, "moe_route: ", k, " of ", n_experts, " experts");
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    std::vector<int32_t> order(static_cast<size_t>(n_experts));
    std::vector<double> p(static_cast<size_t>(n_experts));
    for (int64_t t = begin; t < end; ++t) {
      const float* l = logits + t * n_experts;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      // The softmax over all experts (SoftmaxTopK) or over the chosen k (TopKSoftmax).
      const int64_t n_soft = gating == engine::MoeGating::SoftmaxTopK ? n_experts : k;
      auto logit_of = [&](int64_t i) {
        return double(gating == engine::MoeGating::SoftmaxTopK ? l[i] : l[order[size_t(i)]]);
      };
      double max_l = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n_soft; ++i) max_l = std::max(max_l, logit_of(i));
      for (int64_t i = 0; i < n_soft; ++i) sum += (p[size_t(i)] = std::exp(logit_of(i) - max_l));
      double chosen_sum = 0;
      for (int64_t s = 0; s < k; ++s) {
        const int32_t e = order[size_t(s)];
        const double w = (gating == engine::MoeGating::SoftmaxTopK ? p[size_t(e)] : p[size_t(s)]) / sum;
        experts[t * k + s] = e;
        weights[t * k + s] = float(w);
        chosen_sum += double(weights[t * k + s]);
      }
      if (normalize) {
        const double denom = std::max(chosen_sum, 6.103515625e-5);
        for (int64_t s = 0; s < k; ++s) weights[t * k + s] = float(double(weights[t * k + s]) / denom);
      }
    }
  }, 4);
}

void moe_matmul(ThreadPool& pool, const MoeMatMulArgs& a) {
  const WeightView& w = a.weight;
  GRETA_CHECK(w.cols == a.in_features && w.rows == a.n_experts * a.out_features, "moe_matmul: weight shape");
  for (int64_t i = 0; i < a.n_tokens * a.k; ++i)
    GRETA_CHECK(a.experts[i] >= 0 && a.experts[i] < a.n_experts, "moe_matmul: expert id ", a.experts[i]);
  const bool f32 = w.type == model::GgmlType::F32;
  // Work item: (slot, block of 64 output rows), so a decode step's few slots still spread over the threads.
  const int64_t blocks = (a.out_features + 63) / 64, slots = a.n_tokens * a.k;
  pool.parallel_for(slots * blocks, [&](int64_t begin, int64_t end, int) {
    std::vector<float> row(f32 ? 0 : size_t(a.in_features));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t slot = item / blocks, r0 = item % blocks * 64, r1 = std::min(a.out_features, r0 + 64);
      const int64_t e = a.experts[slot], t = slot / a.k, s = slot % a.k;
      const float* in = a.in + (a.per_slot_input ? t * a.k + s : t) * a.in_features;
      float* out = a.out + slot * a.out_features;
      const float* bias = a.bias.data ? reinterpret_cast<const float*>(a.bias.row(e)) : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wr = w.row(e * a.out_features + r);
        const float* wf = reinterpret_cast<const float*>(wr);
        if (!f32) {
          model::dequantize_row(w.type, wr, row.data(), a.in_features);
          wf = row.data();
        }
        out[r] = dot_f32(wf, in, a.in_features) + (bias ? bias[r] : 0.f);
      }
    }
  }, 1);
}

void moe_combine(ThreadPool& pool, const float* in, const float* weights, float* out, int64_t n_tokens, int64_t k,
                 int64_t width) {
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* o = out + t * width;
      for (int64_t i = 0; i < width; ++i) {
        float acc = 0.f;  // in slot order, in fp32 as ggml sums the weighted experts' views
        for (int64_t s = 0; s < k; ++s) acc += weights[t * k + s] * in[(t * k + s) * width + i];
        o[i] = acc;
      }
    }
  }, 4);
}

}  // namespace greta::cpu
