// The HIP kernels' in-kernel weight decoding (src/hip/dequant.h, compiled here for the CPU: the same code the
// kernels run) against the model layer's reference codecs, for every weight format the HIP backend accepts; the
// q8_0 KV-cache code of src/hip/kv_cache.h (the kv write's quantizer, the attention kernels' accessor) against
// engine/kv_q8.h.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/kv_q8.h"
#include "hip/dequant.h"
#include "hip/kv_cache.h"
#include "model/quants.h"
#include "model/tensor_types.h"

using namespace greta;
using namespace greta::hip;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <WType W>
void check_type() {
  const auto type = static_cast<model::GgmlType>(W);
  const model::TypeTraits& t = model::traits(type);
  CHECK(uint32_t(block_elems(W)) == t.block_elems);
  CHECK(uint32_t(block_bytes(W)) == t.block_bytes);
  // Odd row lengths where the format allows them (float types); whole blocks otherwise.
  const int64_t cols = block_elems(W) == 1 ? 83 : block_elems(W) * 3;
  const int64_t rows = 5;
  CHECK(row_bytes(W, cols) == model::row_bytes(type, uint64_t(cols)));
  const auto values = random_floats(size_t(rows * cols), 7 + uint32_t(W));
  std::vector<uint8_t> data(row_bytes(W, cols) * rows);
  for (int64_t r = 0; r < rows; ++r)
    model::quantize_row(type, values.data() + r * cols, data.data() + uint64_t(r) * row_bytes(W, cols), cols);
  std::vector<float> ref(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = data.data() + uint64_t(r) * row_bytes(W, cols);
    model::dequantize_row(type, row, ref.data(), cols);
    int64_t bad = -1;
    float bad_got = 0, bad_want = 0;
    for (int64_t k0 = 0; k0 < cols; k0 += 16) {
      float got[16];
      dequant_group16<W>(row, k0, cols, got);
      for (int j = 0; j < 16; ++j) {
        const float want = k0 + j < cols ? ref[size_t(k0 + j)] : 0.f;  // past the row: the GEMM's zero padding
        if (bad < 0 && !(std::fabs(got[j] - want) <= 1e-6f * std::fabs(want))) bad = k0 + j, bad_got = got[j], bad_want = want;
      }
    }
    CHECK_MESSAGE(bad < 0, model::type_name(type), " row ", r, " weight ", bad, ": ", bad_got, " vs ", bad_want);
  }
}

}  // namespace

TEST_CASE("WType ids are ggml's type ids, and unsupported ids are rejected") {
#define GRETA_ID_CASE(T) CHECK(uint32_t(WType::T) == uint32_t(model::GgmlType::T));
  GRETA_HIP_FOR_EACH_WTYPE(GRETA_ID_CASE)
#undef GRETA_ID_CASE
  CHECK_FALSE(is_supported(static_cast<WType>(model::GgmlType::Q8_1)));
  CHECK_FALSE(is_supported(static_cast<WType>(model::GgmlType::Q8_K)));
  CHECK_FALSE(is_supported(static_cast<WType>(1234)));
}

TEST_CASE("dequant_group16 decodes every format like the reference codecs") {
#define GRETA_DEQUANT_CASE(T) \
  SUBCASE(#T) { check_type<WType::T>(); }
  GRETA_HIP_FOR_EACH_WTYPE(GRETA_DEQUANT_CASE)
#undef GRETA_DEQUANT_CASE
}

// Random block bytes for the table formats: every code of both tables, IQ4_XS's 6-bit scale codes, random finite
// f16 scales and every E8M0 exponent but the two subnormal ones (the kernels run on devices that may flush them).
template <WType W>
void check_random_blocks(uint32_t seed) {
  const auto type = static_cast<model::GgmlType>(W);
  const int64_t cols = block_elems(W) * 4;
  std::mt19937 rng(seed);
  std::vector<uint8_t> row(row_bytes(W, cols));
  for (auto& b : row) b = uint8_t(rng());
  for (int64_t blk = 0; blk < cols / block_elems(W); ++blk) {
    uint8_t* p = row.data() + blk * block_bytes(W);
    if constexpr (W == WType::MXFP4) {
      if (p[0] < 2) p[0] = uint8_t(p[0] + 2);
    } else {
      if ((p[1] & 0x7c) == 0x7c) p[1] ^= 0x04;  // no Inf / NaN scales
    }
  }
  std::vector<float> ref(static_cast<size_t>(cols));
  model::dequantize_row(type, row.data(), ref.data(), cols);
  for (int64_t k0 = 0; k0 < cols; k0 += 16) {
    float got[16];
    dequant_group16<W>(row.data(), k0, cols, got);
    for (int j = 0; j < 16; ++j)
      REQUIRE_MESSAGE(std::memcmp(&got[j], &ref[size_t(k0 + j)], 4) == 0, model::type_name(type), " weight ", k0 + j,
                      ": ", got[j], " vs ", ref[size_t(k0 + j)]);
  }
}

TEST_CASE("dequant_group16: table formats (IQ4_NL, IQ4_XS, MXFP4) on random block bytes, bit for bit") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    check_random_blocks<WType::IQ4_NL>(seed);
    check_random_blocks<WType::IQ4_XS>(seed);
    check_random_blocks<WType::MXFP4>(seed);
  }
}

TEST_CASE("q8_0 KV cache: the kv write's block quantizer is kv_q8_quantize bit for bit, the accessor kv_q8_value") {
  CHECK(kQ8Block == engine::kKvQ8Block);
  CHECK(kQ8Words == engine::kKvQ8Words);
  // Random rows, an all-zero block, exact halves (x * id = k + 0.5 for amax = 127: halves away from zero), a block
  // whose maximum is negative, tiny and large magnitudes.
  const int64_t n = 32 * 12;
  std::vector<float> x = random_floats(size_t(n), 91);
  for (int i = 0; i < 32; ++i) x[size_t(32 + i)] = 0.f;
  for (int i = 0; i < 32; ++i) x[size_t(64 + i)] = i == 0 ? 127.f : float(i % 9) - 4.5f;
  for (int i = 0; i < 32; ++i) x[size_t(96 + i)] = i == 5 ? -3.f : 0.01f * float(i);
  for (int i = 0; i < 32; ++i) x[size_t(128 + i)] *= 1e-30f;
  for (int i = 0; i < 32; ++i) x[size_t(160 + i)] *= 1e30f;
  std::vector<uint32_t> want(size_t(n / 32 * 9)), got(want.size(), 0xdeadbeefu);
  engine::kv_q8_quantize(x.data(), want.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) q8_quantize_block(x.data() + b * 32, got.data() + b * 9);
  CHECK(got == want);
  const KvQ8 cache{want.data()};
  for (int64_t e = 0; e < n; ++e) REQUIRE(cache.at(e) == engine::kv_q8_value(want.data(), e));
  // row_dot over slices that start and end inside blocks (head slices of head_dim 40): the dequantized values in
  // order, as a plain loop over at().
  const std::vector<float> q = random_floats(100, 92);
  for (int64_t base : {int64_t(0), int64_t(40), int64_t(75), int64_t(200)})
    for (int64_t len : {int64_t(1), int64_t(40), int64_t(64), int64_t(100)}) {
      float ref = 0.f;
      for (int64_t d = 0; d < len; ++d) ref += q[size_t(d)] * cache.at(base + d);
      const float dot = cache.row_dot(q.data(), base, len);
      CHECK_MESSAGE(std::fabs(dot - ref) <= 1e-5f * (1.f + std::fabs(ref)), "base ", base, " len ", len);
    }
}
