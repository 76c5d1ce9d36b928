// The GPU weight decoders (shaders/dequant.glsl, through the dequant_rows_<type> kernels) against the CPU reference
// codecs (model::dequantize_row), bit for bit, for every GGUF weight type: quantizer output and random block bytes
// (every code bit pattern, random finite f16 scales, subnormal ones included; MXFP4: every E8M0 exponent but the two
// subnormal ones), several rows, odd row counts, rows at
// unaligned byte offsets, f32/f16/bf16 rows with tails (cols % 4 != 0) and capped grids (grid-stride loop).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "core/half.h"
#include "model/quants.h"
#include "model/tensor_types.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;
using model::GgmlType;

namespace {

struct WeightType {
  GgmlType type;
  ShaderId shader;
  std::vector<uint32_t> f16_fields;  // byte offsets of the f16 scale/min fields inside one block
};

const std::vector<WeightType>& float_types() {
  static const std::vector<WeightType> t = {
      {GgmlType::F32, ShaderId::dequant_rows_f32, {}},
      {GgmlType::F16, ShaderId::dequant_rows_f16, {}},
      {GgmlType::BF16, ShaderId::dequant_rows_bf16, {}},
  };
  return t;
}

const std::vector<WeightType>& quant_types() {
  static const std::vector<WeightType> t = {
      {GgmlType::Q4_0, ShaderId::dequant_rows_q4_0, {0}},       {GgmlType::Q4_1, ShaderId::dequant_rows_q4_1, {0, 2}},
      {GgmlType::Q5_0, ShaderId::dequant_rows_q5_0, {0}},       {GgmlType::Q5_1, ShaderId::dequant_rows_q5_1, {0, 2}},
      {GgmlType::Q8_0, ShaderId::dequant_rows_q8_0, {0}},       {GgmlType::Q2_K, ShaderId::dequant_rows_q2_k, {80, 82}},
      {GgmlType::Q3_K, ShaderId::dequant_rows_q3_k, {108}},     {GgmlType::Q4_K, ShaderId::dequant_rows_q4_k, {0, 2}},
      {GgmlType::Q5_K, ShaderId::dequant_rows_q5_k, {0, 2}},    {GgmlType::Q6_K, ShaderId::dequant_rows_q6_k, {208}},
      {GgmlType::IQ4_NL, ShaderId::dequant_rows_iq4_nl, {0}},   {GgmlType::IQ4_XS, ShaderId::dequant_rows_iq4_xs, {0}},
      {GgmlType::MXFP4, ShaderId::dequant_rows_mxfp4, {}},
  };
  return t;
}

struct Push {
  uint32_t first_row_byte;
  uint32_t row_bytes;
  uint32_t rows;
  uint32_t cols;
};

// A packed matrix: `bytes` holds rows of row_bytes bytes starting at first_row_byte; the rest is random padding.
struct Matrix {
  std::vector<uint8_t> bytes;
  uint32_t first_row_byte = 0, row_bytes = 0, rows = 0, cols = 0;
};

Matrix make_layout(GgmlType type, uint32_t rows, uint32_t cols, uint32_t first_row_byte, uint32_t seed) {
  Matrix m;
  m.first_row_byte = first_row_byte;
  m.row_bytes = uint32_t(model::row_bytes(type, cols));
  m.rows = rows;
  m.cols = cols;
  const size_t used = first_row_byte + size_t(rows) * m.row_bytes;
  m.bytes = random_bytes((used + 3) / 4 * 4 + 8, seed);  // a multiple of 4, with random bytes around the rows
  return m;
}

// Rows quantized from random non-zero floats; row r is scaled by 2^(2r - 6) so the scales span several binades.
Matrix quantized_matrix(GgmlType type, uint32_t rows, uint32_t cols, uint32_t first_row_byte, uint32_t seed) {
  REQUIRE(model::can_quantize(type));
  Matrix m = make_layout(type, rows, cols, first_row_byte, seed);
  auto x = greta::test::random_floats(size_t(rows) * cols, seed + 1, -1.f, 1.f);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < cols; ++c) {
      float& v = x[size_t(r) * cols + c];
      if (v == 0.f) v = 0.5f;
      v = std::ldexp(v, int(2 * r) - 6);
    }
  for (uint32_t r = 0; r < rows; ++r)
    model::quantize_row(type, x.data() + size_t(r) * cols, m.bytes.data() + first_row_byte + size_t(r) * m.row_bytes,
                        cols);
  return m;
}

// Random block bytes with every f16 field replaced by a random finite f16 (every 5th a subnormal one).
Matrix random_block_matrix(const WeightType& wt, uint32_t rows, uint32_t cols, uint32_t first_row_byte,
                           uint32_t seed) {
  Matrix m = make_layout(wt.type, rows, cols, first_row_byte, seed);
  const auto& tr = model::traits(wt.type);
  std::mt19937 rng(seed + 7);
  uint32_t k = 0;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t b = 0; b < cols / tr.block_elems; ++b)
      for (uint32_t off : wt.f16_fields) {
        uint16_t h = uint16_t(rng());
        if (k++ % 5 == 0) h &= 0x83ffu;                              // exponent 0: subnormal (or zero)
        if ((h & 0x7c00u) == 0x7c00u) h ^= 0x0400u;                   // Inf/NaN exponent -> largest finite binade
        uint8_t* p = m.bytes.data() + first_row_byte + size_t(r) * m.row_bytes + size_t(b) * tr.block_bytes + off;
        p[0] = uint8_t(h);
        p[1] = uint8_t(h >> 8);
      }
  // MXFP4's E8M0 exponent byte (byte 0 of each block): at least 2, since e = 0 and 1 give subnormal scales, which a
  // device may flush to zero (real blocks have e near 127); e = 255 is kept (12 * 2^127 overflows to Inf on both).
  if (wt.type == GgmlType::MXFP4)
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t b = 0; b < cols / tr.block_elems; ++b) {
        uint8_t& e = m.bytes[first_row_byte + size_t(r) * m.row_bytes + size_t(b) * tr.block_bytes];
        if (e < 2) e = uint8_t(2 + e);
      }
  return m;
}

std::string hex_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  std::ostringstream s;
  s << f << " (0x" << std::hex << u << ")";
  return s.str();
}

// Runs dequant_rows on `m` with at most `max_groups` workgroups of 64 and compares with the CPU decoder bit for bit.
void check_matrix(VkFixture& f, const WeightType& wt, const Matrix& m, uint32_t max_groups) {
  CAPTURE(model::type_name(wt.type));
  CAPTURE(m.rows);
  CAPTURE(m.cols);
  CAPTURE(m.first_row_byte);
  CAPTURE(max_groups);
  const size_t n = size_t(m.rows) * m.cols;
  std::vector<float> cpu(n);
  for (uint32_t r = 0; r < m.rows; ++r)
    model::dequantize_row(wt.type, m.bytes.data() + m.first_row_byte + size_t(r) * m.row_bytes,
                          cpu.data() + size_t(r) * m.cols, m.cols);
  size_t nans = 0;
  for (float v : cpu) nans += std::isnan(v);
  REQUIRE(nans == 0);

  const uint32_t guard = 5;  // words after the output that must stay untouched
  Buffer weights = f.alloc().create_buffer(m.bytes.size(), MemoryUse::device, "dequant weights");
  Buffer out = f.alloc().create_buffer((n + guard) * 4, MemoryUse::device, "dequant out");
  f.xfer().upload(weights, m.bytes);
  const std::vector<uint32_t> poison(n + guard, 0xffffffffu);  // NaN: an unwritten output never matches
  f.xfer().upload(out, poison);

  const uint32_t local = 64;
  const Push push{m.first_row_byte, m.row_bytes, m.rows, m.cols};
  const uint64_t items = uint64_t(m.rows) * ((m.cols + 3) / 4);
  const uint32_t groups = std::min(group_count(items, local, f.ctx().info().max_workgroup_count[0]), max_groups);
  run_dispatch(f.ctx(), f.pipes().get(wt.shader, {{0, local}}), {weights.span(), out.span()}, as_push(push),
               {groups, 1, 1});
  const auto gpu = f.xfer().download<float>(out, n + guard);

  size_t mismatches = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&gpu[i], &cpu[i], 4) != 0) {
      if (mismatches++ == 0) first = i;
    }
  if (mismatches) {
    FAIL_CHECK(mismatches << " of " << n << " values differ; first at row " << first / m.cols << ", col "
                          << first % m.cols << ": gpu " << hex_bits(gpu[first]) << ", cpu " << hex_bits(cpu[first]));
  }
  CHECK(std::memcmp(gpu.data() + n, poison.data(), guard * 4) == 0);
}

}  // namespace

TEST_CASE_FIXTURE(VkFixture, "dequant_rows f32/f16/bf16 match model::dequantize_row bit for bit (tails, unaligned rows)") {
  uint32_t seed = 100;
  for (const auto& wt : float_types()) {
    for (uint32_t cols : {2u, 3u, 7u, 13u, 68u}) {
      // Offsets 2 and 6 put the rows at 2-byte alignment (f32 reads then straddle words), 3 at an odd byte.
      for (uint32_t offset : {2u, 6u, 3u}) check_matrix(*this, wt, quantized_matrix(wt.type, 7, cols, offset, seed++), ~0u);
    }
    // Grid-stride loop: 2 workgroups cover 9 rows of 257 columns (with a tail).
    check_matrix(*this, wt, quantized_matrix(wt.type, 9, 257, 6, seed++), 2);
  }
}

TEST_CASE_FIXTURE(VkFixture, "dequant_rows legacy, K-quant and table formats match model::dequantize_row bit for bit") {
  uint32_t seed = 500;
  for (const auto& wt : quant_types()) {
    const uint32_t block = model::traits(wt.type).block_elems;
    for (uint32_t blocks : {2u, 3u}) {
      const uint32_t cols = blocks * block;
      // Quantizer output (what real files hold).
      check_matrix(*this, wt, quantized_matrix(wt.type, 7, cols, 6, seed++), ~0u);
      // Every bit pattern of the code, scale and min fields; the f16 fields random but finite.
      check_matrix(*this, wt, random_block_matrix(wt, 7, cols, 2, seed++), ~0u);
      // Odd byte offset (beyond what GGUF needs: dequant.glsl reads any alignment), capped grid.
      check_matrix(*this, wt, random_block_matrix(wt, 5, cols, 3, seed++), 1);
    }
  }
}
