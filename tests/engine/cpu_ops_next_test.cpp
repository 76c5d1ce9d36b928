// CPU reference kernels of the ops the newer architectures added (engine/plan.h): GLU activations, sliding-window
// and sink attention, YaRN rope, and the mixture-of-experts route / matmul / combine, each against a naive
// double-precision reference written from the formulas in plan.h, on random inputs with odd sizes, and
// bit-identical for every thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/ops.h"
#include "model/quants.h"
#include "test_util.h"
#include "thread_counts.h"

using namespace greta;
using namespace greta::cpu;
using greta::test::random_floats;
using greta::test::run_all_thread_counts;


TEST_CASE("glu: SiLU, GELU(tanh) and gpt-oss's clamped SwiGLU vs their formulas, values past the clamp included") {
  const int64_t n = 1031;
  const auto g = random_floats(size_t(n), 7, -12.f, 12.f), u = random_floats(size_t(n), 8, -12.f, 12.f);
  for (engine::GluKind kind : {engine::GluKind::SiLU, engine::GluKind::GeluTanh, engine::GluKind::SwiGluOai}) {
    CAPTURE(engine::glu_kind_name(kind));
    const auto out = run_all_thread_counts([&](ThreadPool& pool) {
      std::vector<float> o(static_cast<size_t>(n));
      glu(pool, kind, g.data(), u.data(), o.data(), n, 1.702f, 7.f);
      return o;
    });
    int clamped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[size_t(i)], y = u[size_t(i)];
      double ref = 0;
      if (kind == engine::GluKind::SiLU) ref = x / (1 + std::exp(-x)) * y;
      else if (kind == engine::GluKind::GeluTanh) ref = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * y;
      else {
        const double xc = std::min(x, 7.0), yc = std::max(-7.0, std::min(y, 7.0));
        clamped += x > 7 || std::fabs(y) > 7;
        ref = xc / (1 + std::exp(-1.702 * xc)) * (yc + 1);
      }
      CHECK(std::fabs(out[size_t(i)] - ref) <= 1e-6 * std::fabs(ref) + 1e-6);
    }
    if (kind == engine::GluKind::SwiGluOai) CHECK(clamped > 100);  // the inputs do reach the clamp
  }
}

TEST_CASE("attention: a sliding window and sinks vs a masked-softmax reference with an extra logit") {
  // One sequence of 13 positions on scrambled pages of 4; queries at several positions; GQA 6/2.
  const int64_t page = 4, pps = 4, rows = 20, n_heads = 6, n_kv = 2, hd = 7, hdv = 5;
  const std::vector<int32_t> table = {2, 4, 1, 3};
  const std::vector<int32_t> positions = {0, 3, 7, 12, 12 - 1}, seq(positions.size(), 0);
  const int64_t n_tokens = int64_t(positions.size());
  const auto q = random_floats(size_t(n_tokens * n_heads * hd), 21, -2.f, 2.f);
  const auto kc = random_floats(size_t(rows * n_kv * hd), 22, -2.f, 2.f);
  const auto vc = random_floats(size_t(rows * n_kv * hdv), 23);
  const auto sinks = random_floats(size_t(n_heads), 24, -3.f, 3.f);
  const float scale = 0.37f;
  for (int64_t window : {0, 1, 3, 8, 64})
    for (bool with_sinks : {false, true}) {
      CAPTURE(window);
      CAPTURE(with_sinks);
      const auto out = run_all_thread_counts([&](ThreadPool& pool) {
        std::vector<float> o(static_cast<size_t>(n_tokens * n_heads * hdv));
        AttentionArgs a{q.data(), {const_cast<float*>(kc.data()), engine::ElemType::F32, rows},
                        {const_cast<float*>(vc.data()), engine::ElemType::F32, rows}, positions.data(), seq.data(),
                        table.data(), o.data(), n_tokens, n_heads, n_kv, hd, hdv, 1, page, pps, scale};
        a.window = window;
        a.sinks = with_sinks ? sinks.data() : nullptr;
        attention(pool, a);
        return o;
      });
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t h = 0; h < n_heads; ++h) {
          const int64_t g = h / (n_heads / n_kv), p = positions[size_t(t)];
          const auto row = [&](int64_t j) { return table[size_t(j / page)] * page + j % page; };
          std::vector<double> s;
          std::vector<int64_t> keys;
          for (int64_t j = 0; j <= p; ++j) {
            if (window > 0 && p - j >= window) continue;
            double d = 0;
            for (int64_t i = 0; i < hd; ++i)
              d += double(q[size_t((t * n_heads + h) * hd + i)]) * kc[size_t((row(j) * n_kv + g) * hd + i)];
            s.push_back(d * scale);
            keys.push_back(j);
          }
          double mx = with_sinks ? sinks[size_t(h)] : -INFINITY;
          for (double v : s) mx = std::max(mx, v);
          double z = with_sinks ? std::exp(sinks[size_t(h)] - mx) : 0;
          for (double& v : s) z += (v = std::exp(v - mx));
          for (int64_t i = 0; i < hdv; ++i) {
            double ref = 0;
            for (size_t j = 0; j < keys.size(); ++j) ref += s[j] / z * vc[size_t((row(keys[j]) * n_kv + g) * hdv + i)];
            REQUIRE(std::fabs(out[size_t((t * n_heads + h) * hdv + i)] - ref) < 1e-6);
          }
        }
    }
}

TEST_CASE("rope: YaRN blends scaled and unscaled angles by the ramp and scales the magnitude") {
  const int64_t n_tokens = 3, n_heads = 2, head_dim = 12, rope_dims = 12, half = 6;
  const std::vector<int32_t> positions = {0, 5, 1000};
  const auto x = random_floats(size_t(n_tokens * n_heads * head_dim), 31, -1.f, 1.f);
  const float base = 150000.f, freq_scale = 1.f / 32, low = 1.f, high = 4.f, attn_factor = 0.9f;
  const auto out = run_all_thread_counts([&](ThreadPool& pool) {
    std::vector<float> o = x;
    rope(pool, o.data(), positions.data(), n_tokens, n_heads, head_dim, rope_dims, model::RopePairing::NeoxHalves,
         base, freq_scale, nullptr, RopeYarn{1.f, attn_factor, low, high});
    return o;
  });
  const double mscale = attn_factor * (1 + 0.1 * std::log(1 / double(freq_scale)));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double extrap = positions[size_t(t)] * std::pow(double(base), -2.0 * double(i) / rope_dims);
        const double ramp = 1 - std::min(1.0, std::max(0.0, (double(i) - low) / (high - low)));
        const double theta = freq_scale * extrap * (1 - ramp) + extrap * ramp;
        const std::complex<double> in(x[size_t((t * n_heads + h) * head_dim + i)],
                                      x[size_t((t * n_heads + h) * head_dim + i + half)]);
        const std::complex<double> want = in * std::polar(mscale, theta);
        CHECK(std::fabs(out[size_t((t * n_heads + h) * head_dim + i)] - want.real()) < 1e-5);
        CHECK(std::fabs(out[size_t((t * n_heads + h) * head_dim + i + half)] - want.imag()) < 1e-5);
      }
}

TEST_CASE("moe_route: top-k by logit with ties to the lower id; softmax-then-top-k (renormalized) and top-k-softmax") {
  const int64_t n_tokens = 5, E = 9, k = 3;
  auto logits = random_floats(size_t(n_tokens * E), 41, -4.f, 4.f);
  logits[2] = logits[5] = 10.f;  // token 0: a tie at the top between experts 2 and 5
  for (engine::MoeGating gating : {engine::MoeGating::SoftmaxTopK, engine::MoeGating::TopKSoftmax})
    for (bool normalize : {false, true}) {
      std::vector<int32_t> experts(size_t(n_tokens * k));
      std::vector<float> weights(size_t(n_tokens * k));
      ThreadPool pool(2);
      moe_route(pool, logits.data(), experts.data(), weights.data(), n_tokens, E, k, gating, normalize);
      CHECK(experts[0] == 2);
      CHECK(experts[1] == 5);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* l = logits.data() + t * E;
        std::vector<int32_t> order(static_cast<size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
        double all = 0, chosen = 0;
        for (int64_t e = 0; e < E; ++e) all += std::exp(double(l[e]) - 10);
        for (int64_t s = 0; s < k; ++s) chosen += std::exp(double(l[order[size_t(s)]]) - 10);
        double sum = 0;
        for (int64_t s = 0; s < k; ++s) {
          const int32_t e = order[size_t(s)];
          CHECK(experts[size_t(t * k + s)] == e);
          const double p = std::exp(double(l[e]) - 10);
          double want = gating == engine::MoeGating::SoftmaxTopK ? p / all : p / chosen;
          if (normalize) want = p / chosen;
          CHECK(weights[size_t(t * k + s)] == doctest::Approx(want).epsilon(1e-6));
          sum += weights[size_t(t * k + s)];
        }
        if (normalize || gating == engine::MoeGating::TopKSoftmax) CHECK(sum == doctest::Approx(1).epsilon(1e-6));
      }
    }
}

TEST_CASE("moe_matmul and moe_combine: each slot is its expert's rows times its input, plus the expert's bias") {
  const int64_t n_tokens = 4, k = 2, E = 5, in_f = 64, out_f = 67;
  for (model::GgmlType type : {model::GgmlType::F32, model::GgmlType::Q8_0, model::GgmlType::Q4_0}) {
    const uint64_t rb = model::row_bytes(type, uint64_t(in_f));
    const auto values = random_floats(size_t(E * out_f * in_f), 51, -1.f, 1.f);
    std::vector<uint8_t> bytes(rb * uint64_t(E * out_f));
    std::vector<float> decoded(values.size());
    for (int64_t r = 0; r < E * out_f; ++r) {
      model::quantize_row(type, values.data() + r * in_f, bytes.data() + uint64_t(r) * rb, in_f);
      model::dequantize_row(type, bytes.data() + uint64_t(r) * rb, decoded.data() + r * in_f, in_f);
    }
    const auto bias = random_floats(size_t(E * out_f), 52);
    const std::vector<int32_t> experts = {4, 0, 2, 4, 1, 3, 0, 2};
    const auto routes = random_floats(size_t(n_tokens * k), 53, 0.f, 1.f);
    for (bool per_slot : {false, true})
      for (bool with_bias : {false, true}) {
        CAPTURE(per_slot);
        CAPTURE(with_bias);
        const auto in = random_floats(size_t(n_tokens * (per_slot ? k : 1) * in_f), 54);
        const auto out = run_all_thread_counts([&](ThreadPool& pool) {
          std::vector<float> o(static_cast<size_t>(n_tokens * k * out_f));
          const WeightView w{type, bytes.data(), E * out_f, in_f, rb};
          const WeightView b{model::GgmlType::F32, reinterpret_cast<const uint8_t*>(bias.data()), E, out_f,
                             uint64_t(out_f) * 4};
          moe_matmul(pool, {w, with_bias ? b : WeightView{}, in.data(), experts.data(), o.data(), n_tokens, k, in_f,
                            out_f, E, per_slot});
          return o;
        });
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t s = 0; s < k; ++s) {
            const int64_t e = experts[size_t(t * k + s)];
            const float* x = in.data() + (per_slot ? t * k + s : t) * in_f;
            for (int64_t r = 0; r < out_f; ++r) {
              double ref = with_bias ? bias[size_t(e * out_f + r)] : 0;
              for (int64_t i = 0; i < in_f; ++i) ref += double(decoded[size_t((e * out_f + r) * in_f + i)]) * x[i];
              REQUIRE(std::fabs(out[size_t((t * k + s) * out_f + r)] - ref) < 1e-4);
            }
          }
        // combine: the route-weighted sum of each token's slots
        std::vector<float> combined(size_t(n_tokens * out_f));
        ThreadPool pool(2);
        moe_combine(pool, out.data(), routes.data(), combined.data(), n_tokens, k, out_f);
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t r = 0; r < out_f; ++r) {
            double ref = 0;
            for (int64_t s = 0; s < k; ++s) ref += double(routes[size_t(t * k + s)]) * out[size_t((t * k + s) * out_f + r)];
            CHECK(std::fabs(combined[size_t(t * out_f + r)] - ref) < 1e-5);
          }
      }
  }
}

TEST_CASE("moe_matmul refuses an expert id outside the weight") {
  const std::vector<float> w(size_t(2 * 3 * 4), 0.5f), in(4, 1.f);
  const std::vector<int32_t> experts = {2};
  std::vector<float> out(3);
  ThreadPool pool(1);
  const WeightView view{model::GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), 6, 4, 16};
  CHECK_THROWS(moe_matmul(pool, {view, {}, in.data(), experts.data(), out.data(), 1, 1, 4, 3, 2, false}));
}
