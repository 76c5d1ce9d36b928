// CPU reference kernels vs naive double-precision references on random inputs with odd sizes, and bit-identical
// results for every thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "cpu/ops.h"
#include "engine/kv_q8.h"
#include "core/thread_pool.h"
#include "model/quants.h"
#include "test_util.h"
#include "thread_counts.h"

using namespace greta;
using namespace greta::cpu;
using greta::model::GgmlType;
using greta::test::random_floats;
using greta::test::run_all_thread_counts;

namespace {

// A random weight matrix stored in `type`, plus its exact fp32 decoding (the matmul oracle's weights).
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;  // [rows, cols]
  WeightView view;
};

TestWeight make_weight(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  TestWeight w;
  const std::vector<float> values = random_floats(size_t(rows * cols), seed, -1.f, 1.f);
  const uint64_t row_bytes = model::row_bytes(type, uint64_t(cols));
  w.bytes.resize(row_bytes * uint64_t(rows));
  w.decoded.resize(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    model::quantize_row(type, values.data() + r * cols, w.bytes.data() + r * row_bytes, cols);
    model::dequantize_row(type, w.bytes.data() + r * row_bytes, w.decoded.data() + r * cols, cols);
  }
  w.view = {type, w.bytes.data(), rows, cols, row_bytes};
  return w;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}


}  // namespace

TEST_CASE("thread pool: covers every index once, propagates exceptions") {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 1000}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
      });
      for (int h : hits) CHECK(h == 1);
    }
    CHECK_THROWS_AS(pool.parallel_for(100, [](int64_t, int64_t, int) { throw Error("boom"); }), Error);
    int64_t sum = 0;  // still usable after an exception
    pool.parallel_for(1, [&](int64_t b, int64_t e, int) { sum += e - b; });
    CHECK(sum == 1);
  }
}

TEST_CASE("dot_f32 matches a double dot product") {
  for (int64_t n : {1, 7, 8, 9, 63, 256, 1001}) {
    const auto a = random_floats(size_t(n), 11 + uint32_t(n)), b = random_floats(size_t(n), 12 + uint32_t(n));
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) ref += double(a[size_t(i)]) * b[size_t(i)], mag += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
    CHECK(std::fabs(dot_f32(a.data(), b.data(), n) - ref) <= 1e-6 * mag + 1e-30);
  }
}

TEST_CASE("embed: rows of every weight type, bad ids rejected") {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    CAPTURE(model::type_name(type));
    const int64_t vocab = 37, dim = model::traits(type).block_elems == 256 ? 256 : 96;
    TestWeight table = make_weight(type, vocab, dim, 5);
    const std::vector<int32_t> tokens = {3, 0, 36, 3, 17};
    const auto out = run_all_thread_counts([&](ThreadPool& pool) {
      std::vector<float> o(tokens.size() * size_t(dim), -7.f);
      embed(pool, table.view, tokens.data(), int64_t(tokens.size()), o.data());
      return o;
    });
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int64_t i = 0; i < dim; ++i)
        REQUIRE(out[t * size_t(dim) + size_t(i)] == table.decoded[size_t(tokens[t] * dim + i)]);
    ThreadPool pool(2);
    std::vector<float> o(static_cast<size_t>(dim));
    const int32_t bad[] = {37}, negative[] = {-1};
    CHECK_THROWS_AS(embed(pool, table.view, bad, 1, o.data()), Error);
    CHECK_THROWS_AS(embed(pool, table.view, negative, 1, o.data()), Error);
  }
}

TEST_CASE("rmsnorm vs double reference (odd widths, in place, per-head rows)") {
  for (int64_t width : {1, 7, 37, 64}) {
    const int64_t rows = 5;
    const auto x = random_floats(size_t(rows * width), 21, -3.f, 3.f);
    const auto w = random_floats(size_t(width), 22, 0.5f, 1.5f);
    const float eps = 1e-5f;
    const auto out = run_all_thread_counts([&](ThreadPool& pool) {
      std::vector<float> o(x.size());
      rmsnorm(pool, x.data(), w.data(), o.data(), rows, width, eps);
      return o;
    });
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < width; ++i) ss += double(x[size_t(r * width + i)]) * x[size_t(r * width + i)];
      const double inv = 1.0 / std::sqrt(ss / double(width) + eps);
      for (int64_t i = 0; i < width; ++i) {
        const double ref = double(x[size_t(r * width + i)]) * inv * w[size_t(i)];
        REQUIRE(std::fabs(out[size_t(r * width + i)] - ref) <= 1e-6 * std::fabs(ref) + 1e-7);
      }
    }
    ThreadPool pool(2);
    std::vector<float> in_place = x;
    rmsnorm(pool, in_place.data(), w.data(), in_place.data(), rows, width, eps);
    CHECK(bit_equal(in_place, out));
  }
}

TEST_CASE("matmul vs double reference for every weight type, several token counts") {
  struct Case {
    GgmlType type;
    int64_t cols;
    double rel_tol;  // of sum |w x|: fp32 accumulation of `cols` products
  };
  const Case cases[] = {
      {GgmlType::F32, 37, 1e-6},   {GgmlType::F16, 45, 1e-6},   {GgmlType::BF16, 29, 1e-6},
      {GgmlType::Q8_0, 224, 1e-6}, {GgmlType::Q4_0, 96, 1e-6},  {GgmlType::Q4_1, 160, 1e-6},
      {GgmlType::Q5_0, 64, 1e-6},  {GgmlType::Q5_1, 32, 1e-6},  {GgmlType::Q2_K, 256, 1e-6},
      {GgmlType::Q3_K, 256, 1e-6}, {GgmlType::Q4_K, 512, 1e-6}, {GgmlType::Q5_K, 256, 1e-6},
      {GgmlType::Q6_K, 256, 1e-6},
  };
  for (const Case& c : cases) {
    CAPTURE(model::type_name(c.type));
    const int64_t rows = 67;
    TestWeight w = make_weight(c.type, rows, c.cols, 31);
    for (int64_t n_tokens : {1, 3, 5}) {
      const auto x = random_floats(size_t(n_tokens * c.cols), 32 + uint32_t(n_tokens), -2.f, 2.f);
      const auto out = run_all_thread_counts([&](ThreadPool& pool) {
        std::vector<float> o(static_cast<size_t>(n_tokens * rows));
        matmul(pool, w.view, x.data(), o.data(), n_tokens);
        return o;
      });
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t i = 0; i < c.cols; ++i) {
            const double p = double(w.decoded[size_t(r * c.cols + i)]) * x[size_t(t * c.cols + i)];
            ref += p;
            mag += std::fabs(p);
          }
          REQUIRE(std::fabs(out[size_t(t * rows + r)] - ref) <= c.rel_tol * mag + 1e-30);
        }
      if (n_tokens > 1) {  // each token's row equals a 1-token matmul of it (prefill == decode)
        ThreadPool pool(2);
        std::vector<float> single(static_cast<size_t>(rows));
        matmul(pool, w.view, x.data() + (n_tokens - 1) * c.cols, single.data(), 1);
        CHECK(std::memcmp(single.data(), out.data() + (n_tokens - 1) * rows, size_t(rows) * 4) == 0);
      }
    }
  }
}

TEST_CASE("matmul reads F32 weights at any alignment") {
  const int64_t rows = 5, cols = 9;
  const auto values = random_floats(size_t(rows * cols), 41);
  std::vector<uint8_t> storage(values.size() * 4 + 1);
  std::memcpy(storage.data() + 1, values.data(), values.size() * 4);  // deliberately misaligned
  const WeightView view{GgmlType::F32, storage.data() + 1, rows, cols, uint64_t(cols) * 4};
  const auto x = random_floats(size_t(cols), 42);
  ThreadPool pool(2);
  std::vector<float> out(static_cast<size_t>(rows));
  matmul(pool, view, x.data(), out.data(), 1);
  for (int64_t r = 0; r < rows; ++r) CHECK(out[size_t(r)] == dot_f32(values.data() + r * cols, x.data(), cols));
}

TEST_CASE("add_bias, add and swiglu vs references") {
  const int64_t rows = 7, width = 13, n = rows * width;
  const auto x = random_floats(size_t(n), 51, -4.f, 4.f), y = random_floats(size_t(n), 52, -4.f, 4.f);
  const auto bias = random_floats(size_t(width), 53);
  const auto biased = run_all_thread_counts([&](ThreadPool& pool) {
    std::vector<float> o = x;
    add_bias(pool, o.data(), bias.data(), rows, width);
    return o;
  });
  const auto summed = run_all_thread_counts([&](ThreadPool& pool) {
    std::vector<float> o = x;
    add(pool, o.data(), y.data(), n);
    return o;
  });
  const auto glu = run_all_thread_counts([&](ThreadPool& pool) {
    std::vector<float> o(static_cast<size_t>(n));
    cpu::glu(pool, engine::GluKind::SiLU, x.data(), y.data(), o.data(), n);
    return o;
  });
  for (int64_t i = 0; i < n; ++i) {
    CHECK(biased[size_t(i)] == x[size_t(i)] + bias[size_t(i % width)]);
    CHECK(summed[size_t(i)] == x[size_t(i)] + y[size_t(i)]);
    const double g = x[size_t(i)], ref = g / (1 + std::exp(-g)) * y[size_t(i)];
    CHECK(std::fabs(glu[size_t(i)] - ref) <= 1e-6 * std::fabs(ref) + 1e-7);
  }
}

TEST_CASE("rope vs complex rotation: adjacent and NEOX pairing, partial rotary, scaled positions, freq factors") {
  struct Case {
    model::RopePairing pairing;
    int64_t head_dim, rope_dims;
    float base, freq_scale;
    bool factors;
  };
  const Case cases[] = {{model::RopePairing::Adjacent, 16, 16, 10000.f, 1.f, false},
                        {model::RopePairing::NeoxHalves, 16, 16, 1e6f, 1.f, false},
                        {model::RopePairing::Adjacent, 12, 8, 500000.f, 0.25f, true},
                        {model::RopePairing::NeoxHalves, 10, 6, 10000.f, 0.5f, true}};
  for (const Case& c : cases) {
    CAPTURE(c.head_dim);
    CAPTURE(c.rope_dims);
    const int64_t n_tokens = 4, n_heads = 3;
    const std::vector<int32_t> positions = {0, 5, 6, 1000};
    const auto x = random_floats(size_t(n_tokens * n_heads * c.head_dim), 61);
    const auto factors = random_floats(size_t(c.rope_dims / 2), 62, 1.f, 8.f);
    const auto out = run_all_thread_counts([&](ThreadPool& pool) {
      std::vector<float> o = x;
      rope(pool, o.data(), positions.data(), n_tokens, n_heads, c.head_dim, c.rope_dims, c.pairing, c.base,
           c.freq_scale, c.factors ? factors.data() : nullptr);
      return o;
    });
    const int64_t half = c.rope_dims / 2;
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* in = x.data() + (t * n_heads + h) * c.head_dim;
        const float* got = out.data() + (t * n_heads + h) * c.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ia = c.pairing == model::RopePairing::Adjacent ? 2 * i : i;
          const int64_t ib = c.pairing == model::RopePairing::Adjacent ? 2 * i + 1 : i + half;
          const double theta = positions[size_t(t)] * double(c.freq_scale) /
                               std::pow(double(c.base), double(2 * i) / double(c.rope_dims)) /
                               (c.factors ? double(factors[size_t(i)]) : 1.0);
          const std::complex<double> z = std::complex<double>(in[ia], in[ib]) * std::polar(1.0, theta);
          REQUIRE(std::fabs(got[ia] - z.real()) < 1e-6);
          REQUIRE(std::fabs(got[ib] - z.imag()) < 1e-6);
        }
        for (int64_t i = c.rope_dims; i < c.head_dim; ++i) REQUIRE(got[i] == in[i]);  // not rotated
      }
  }
}

TEST_CASE("rope: the dot product of two rotated vectors depends only on their distance") {
  const int64_t head_dim = 32;
  const auto q = random_floats(size_t(head_dim), 71), k = random_floats(size_t(head_dim), 72);
  ThreadPool pool(1);
  auto rotated_dot = [&](int32_t pq, int32_t pk, model::RopePairing pairing) {
    std::vector<float> a = q, b = k;
    rope(pool, a.data(), &pq, 1, 1, head_dim, head_dim, pairing, 10000.f, 1.f);
    rope(pool, b.data(), &pk, 1, 1, head_dim, head_dim, pairing, 10000.f, 1.f);
    return dot_f32(a.data(), b.data(), head_dim);
  };
  for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves}) {
    CHECK(rotated_dot(7, 3, pairing) == doctest::Approx(rotated_dot(104, 100, pairing)).epsilon(1e-5));
    CHECK(rotated_dot(7, 3, pairing) != doctest::Approx(rotated_dot(7, 4, pairing)).epsilon(1e-5));
  }
}

TEST_CASE("kv_write places rows at their cache rows and nothing else, f32 and f16") {
  const int64_t width = 6, rows = 10;
  const auto src = random_floats(size_t(3 * width), 81);
  std::vector<float> cache = random_floats(size_t(rows * width), 82);
  const std::vector<float> before = cache;
  const std::vector<int32_t> targets = {4, 9, 5};
  kv_write(src.data(), CacheView{cache.data(), engine::ElemType::F32, rows}, targets.data(), 3, width);
  std::vector<uint16_t> half(size_t(rows * width), 0x3c00);  // 1.0
  kv_write(src.data(), CacheView{half.data(), engine::ElemType::F16, rows}, targets.data(), 3, width);
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < width; ++i) {
      const int64_t t = p == 4 ? 0 : p == 9 ? 1 : p == 5 ? 2 : -1;
      CHECK(cache[size_t(p * width + i)] == (t >= 0 ? src[size_t(t * width + i)] : before[size_t(p * width + i)]));
      CHECK(half[size_t(p * width + i)] == (t >= 0 ? fp32_to_fp16(src[size_t(t * width + i)]) : uint16_t(0x3c00)));
    }
  const int32_t outside[] = {10};
  CHECK_THROWS_AS(kv_write(src.data(), CacheView{cache.data(), engine::ElemType::F32, rows}, outside, 1, width), Error);
}

TEST_CASE("paged attention vs masked-softmax reference: two sequences, GQA, MQA, MHA, f32 and f16 caches") {
  struct Case {
    int64_t n_heads, n_kv_heads, head_dim, head_dim_v;
  };
  // Pages of 2 positions in a pool of 6; two sequences on scrambled pages: tokens 0, 1 of sequence 0 at positions
  // 3, 4 and tokens 2, 3 of sequence 1 at positions 2, 3 (earlier positions already in the cache).
  const int64_t page = 2, pps = 6, rows = 12, ctx = pps * page, n_tokens = 4;
  const std::vector<int32_t> positions = {3, 4, 2, 3}, seq = {0, 0, 1, 1};
  const std::vector<int32_t> table = {3, 0, 5, 1, 4, 2, /* sequence 1 */ 2, 4, 1, 5, 0, 3};
  // q8_0 rows hold whole blocks of 32: its own shapes (K and V widths 32 and 64).
  for (engine::ElemType type : {engine::ElemType::F32, engine::ElemType::F16, engine::ElemType::Q8_0})
    for (const Case& c : type == engine::ElemType::Q8_0
                             ? std::vector<Case>{Case{8, 2, 16, 16}, Case{4, 1, 32, 64}}
                             : std::vector<Case>{Case{6, 2, 5, 7}, Case{4, 1, 8, 8}, Case{3, 3, 9, 4}}) {
      const bool f16 = type == engine::ElemType::F16, q8 = type == engine::ElemType::Q8_0;
      const std::string type_name = engine::elem_type_name(type);
      CAPTURE(type_name);
      CAPTURE(c.n_heads);
      CAPTURE(c.n_kv_heads);
      const auto q = random_floats(size_t(n_tokens * c.n_heads * c.head_dim), 91, -2.f, 2.f);
      auto kc = random_floats(size_t(rows * c.n_kv_heads * c.head_dim), 92, -2.f, 2.f);
      auto vc = random_floats(size_t(rows * c.n_kv_heads * c.head_dim_v), 93);
      std::vector<uint16_t> kh(kc.size()), vh(vc.size());
      for (size_t i = 0; i < kc.size(); ++i) kh[i] = fp32_to_fp16(kc[i]), kc[i] = f16 ? fp16_to_fp32(kh[i]) : kc[i];
      for (size_t i = 0; i < vc.size(); ++i) vh[i] = fp32_to_fp16(vc[i]), vc[i] = f16 ? fp16_to_fp32(vh[i]) : vc[i];
      // q8_0: the caches as blocks, and the reference reads the values they hold.
      std::vector<uint32_t> kq(q8 ? size_t(engine::kv_q8_bytes(int64_t(kc.size())) / 4) : 0),
          vq(q8 ? size_t(engine::kv_q8_bytes(int64_t(vc.size())) / 4) : 0);
      if (q8) {
        engine::kv_q8_quantize(kc.data(), kq.data(), int64_t(kc.size()));
        engine::kv_q8_quantize(vc.data(), vq.data(), int64_t(vc.size()));
        for (size_t i = 0; i < kc.size(); ++i) kc[i] = engine::kv_q8_value(kq.data(), int64_t(i));
        for (size_t i = 0; i < vc.size(); ++i) vc[i] = engine::kv_q8_value(vq.data(), int64_t(i));
      }
      const float scale = float(1 / std::sqrt(double(c.head_dim)));
      const auto out = run_all_thread_counts([&](ThreadPool& pool) {
        std::vector<float> o(static_cast<size_t>(n_tokens * c.n_heads * c.head_dim_v));
        const CacheView k = f16 ? CacheView{kh.data(), type, rows}
                            : q8 ? CacheView{kq.data(), type, rows} : CacheView{kc.data(), type, rows};
        const CacheView v = f16 ? CacheView{vh.data(), type, rows}
                            : q8 ? CacheView{vq.data(), type, rows} : CacheView{vc.data(), type, rows};
        attention(pool, {q.data(), k, v, positions.data(), seq.data(), table.data(), o.data(), n_tokens, c.n_heads,
                         c.n_kv_heads, c.head_dim, c.head_dim_v, 2, page, pps, scale});
        return o;
      });
      // Reference: scores over the sequence's whole context with a causal mask of -inf, softmax, weighted sum.
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t h = 0; h < c.n_heads; ++h) {
          const int64_t g = h * c.n_kv_heads / c.n_heads;  // heads share KV heads in contiguous groups
          const auto row = [&](int64_t j) { return table[size_t(seq[size_t(t)] * pps + j / page)] * page + j % page; };
          std::vector<double> s(static_cast<size_t>(ctx));
          double mx = -INFINITY;
          for (int64_t j = 0; j < ctx; ++j) {
            double d = 0;
            for (int64_t i = 0; i < c.head_dim; ++i)
              d += double(q[size_t((t * c.n_heads + h) * c.head_dim + i)]) *
                   kc[size_t((row(j) * c.n_kv_heads + g) * c.head_dim + i)];
            s[size_t(j)] = j <= positions[size_t(t)] ? d * scale : -INFINITY;
            mx = std::max(mx, s[size_t(j)]);
          }
          double z = 0;
          for (auto& v : s) z += (v = std::exp(v - mx));
          for (int64_t i = 0; i < c.head_dim_v; ++i) {
            double ref = 0;
            for (int64_t j = 0; j < ctx; ++j)
              ref += s[size_t(j)] / z * vc[size_t((row(j) * c.n_kv_heads + g) * c.head_dim_v + i)];
            REQUIRE(std::fabs(out[size_t((t * c.n_heads + h) * c.head_dim_v + i)] - ref) < 1e-6);
          }
        }
    }
}

TEST_CASE("q8_0 KV blocks: within half a step of every value, halves away from zero, zero blocks, kv_write rows") {
  std::vector<float> x = random_floats(size_t(4 * 32), 95, -3.f, 3.f);
  for (size_t i = 64; i < 96; ++i) x[i] = 0.f;  // an all-zero block
  x[96] = 127.f, x[97] = 0.5f, x[98] = -0.5f, x[99] = 1.5f, x[100] = -126.5f;  // d = 1: ties
  std::vector<uint32_t> q(size_t(engine::kv_q8_bytes(128) / 4));
  engine::kv_q8_quantize(x.data(), q.data(), 128);
  for (int64_t i = 0; i < 128; ++i) {
    float amax = 0;
    for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(x[size_t(j)]));
    CHECK(std::fabs(engine::kv_q8_value(q.data(), i) - x[size_t(i)]) <= amax / 127.f / 2 * 1.0001f + 1e-7f);
  }
  for (int64_t i = 64; i < 96; ++i) CHECK(engine::kv_q8_value(q.data(), i) == 0.f);
  CHECK(engine::kv_q8_value(q.data(), 97) == 1.f);
  CHECK(engine::kv_q8_value(q.data(), 98) == -1.f);
  CHECK(engine::kv_q8_value(q.data(), 99) == 2.f);
  CHECK(engine::kv_q8_value(q.data(), 100) == -127.f);
  // kv_write: token t's row goes to its cache row, as blocks.
  const int64_t width = 64, rows = 5;
  const auto src = random_floats(size_t(2 * width), 96);
  std::vector<uint32_t> cache(size_t(engine::kv_q8_bytes(rows * width) / 4), 0);
  const std::vector<int32_t> targets = {3, 1};
  kv_write(src.data(), CacheView{cache.data(), engine::ElemType::Q8_0, rows}, targets.data(), 2, width);
  std::vector<uint32_t> want(size_t(engine::kv_q8_bytes(width) / 4));
  for (int t = 0; t < 2; ++t) {
    engine::kv_q8_quantize(src.data() + t * width, want.data(), width);
    CHECK(std::equal(want.begin(), want.end(), cache.begin() + targets[size_t(t)] * int64_t(want.size())));
  }
  CHECK(std::all_of(cache.begin(), cache.begin() + int64_t(want.size()), [](uint32_t w) { return w == 0; }));
}

TEST_CASE("gather_rows copies the listed rows and refuses rows outside the input") {
  const int64_t width = 5;
  const auto in = random_floats(size_t(4 * width), 94);
  const std::vector<int32_t> rows = {3, 0, 3};
  std::vector<float> out(size_t(3 * width));
  gather_rows(in.data(), rows.data(), out.data(), 3, width, 4);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < width; ++i) CHECK(out[size_t(r * width + i)] == in[size_t(rows[size_t(r)] * width + i)]);
  const int32_t outside[] = {4};
  CHECK_THROWS_AS(gather_rows(in.data(), outside, out.data(), 1, width, 4), Error);
}
