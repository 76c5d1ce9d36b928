// Tensor codecs (src/model/quants*.cpp):
//  - hand-built blocks decode to known values: literal blocks spelled byte by byte from ggml's format definitions,
//    and random codes packed by an independent per-weight packer written from the layout comments (nibble order,
//    high-bit placement, the K-quants' packed 6-bit scales);
//  - quantize -> dequantize round trips on random data with per-type NMSE bounds, exact for F32/F16/BF16;
//  - dot_row against a double-precision dot of the dequantized row (and at unaligned addresses);
//  - llama.cpp's files in ../shared/models: every quantized tensor decodes close to the F32 original, and our
//    quantizers re-create llama.cpp's bytes from the F32 tensors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "model/gguf.h"
#include "model/quant_blocks.h"
#include "model/quants.h"
#include "test_util.h"

using namespace greta::model;
using greta::test::nmse;
using greta::test::random_floats;

namespace {

constexpr GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                  GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                                  GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                  GgmlType::MXFP4};
// The types of ../shared/models/synth-llama-d256-*.gguf (llama-quantize's output, checked byte for byte below).
constexpr GgmlType kFileTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                   GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                                   GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

void put_half(uint8_t* p, float v) {
  const uint16_t h = greta::fp32_to_fp16(v);
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}

template <class Block>
std::vector<float> decode_block(GgmlType type, const Block& b) {
  std::vector<float> out(traits(type).block_elems);
  dequantize_row(type, &b, out.data(), int64_t(out.size()));
  return out;
}

std::vector<uint8_t> encode(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(row_bytes(type, x.size()));
  quantize_row(type, x.data(), bytes.data(), int64_t(x.size()));
  return bytes;
}

std::vector<float> decode(GgmlType type, const uint8_t* bytes, size_t n) {
  std::vector<float> out(n);
  dequantize_row(type, bytes, out.data(), int64_t(n));
  return out;
}

// Row length used for random tests: a few whole blocks, odd counts (F types: an odd number of elements).
int64_t test_row_length(GgmlType t) {
  const uint32_t be = traits(t).block_elems;
  return be == 1 ? 83 : be == 32 ? 32 * 7 : 256 * 3;
}

// Round-trip NMSE bounds on uniform [-1, 1) data: about 1.3x the worst value measured over the seeds and row shapes
// below (measured worst: F16 4.4e-8, BF16 2.4e-6, Q8_0 1.5e-5, Q6_K 1.8e-4, Q5_K 8.0e-4, Q5_1 9.7e-4, Q5_0 1.1e-3,
// Q4_K 3.0e-3, Q4_1 4.3e-3, Q4_0 4.9e-3, Q3_K 1.7e-2, Q2_K 5.9e-2; IQ4_NL 4.2e-3, IQ4_XS 4.2e-3, MXFP4 2.2e-2). They follow
// the bits per weight (MXFP4's power-of-two scale and 8 magnitudes make it the coarsest 4-bit type).
double roundtrip_bound(GgmlType t) {
  switch (t) {
    case GgmlType::F16: return 6e-8;
    case GgmlType::BF16: return 3.2e-6;
    case GgmlType::Q8_0: return 2e-5;
    case GgmlType::Q6_K: return 2.4e-4;
    case GgmlType::Q5_K: return 1.05e-3;
    case GgmlType::Q5_1: return 1.3e-3;
    case GgmlType::Q5_0: return 1.5e-3;
    case GgmlType::Q4_K: return 4e-3;
    case GgmlType::Q4_1: return 5.6e-3;
    case GgmlType::Q4_0: return 6.5e-3;
    case GgmlType::Q3_K: return 2.2e-2;
    case GgmlType::Q2_K: return 7.6e-2;
    case GgmlType::IQ4_NL: return 5.5e-3;
    case GgmlType::IQ4_XS: return 5.5e-3;
    case GgmlType::MXFP4: return 2.9e-2;
    default: return 0;
  }
}

}  // namespace

// ---- hand-built blocks ---------------------------------------------------------------------------------------------

TEST_CASE("fp16 scales are stored little-endian") {
  uint8_t b[2];
  put_half(b, 0.5f);  // binary16 0.5 = 0x3800
  CHECK(b[0] == 0x00);
  CHECK(b[1] == 0x38);
}

TEST_CASE("F16 rows decode every half value exactly like fp16_to_fp32 (incl. subnormals, Inf, NaN payloads)") {
  std::vector<uint8_t> bytes(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    bytes[2 * h] = uint8_t(h);
    bytes[2 * h + 1] = uint8_t(h >> 8);
  }
  const auto out = decode(GgmlType::F16, bytes.data(), 65536);
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ref = greta::fp16_to_fp32(uint16_t(h));
    if (std::memcmp(&ref, &out[h], 4) != 0) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("Q8_0 / Q4_0 / Q4_1 literal blocks") {
  BlockQ8_0 q8{};
  put_half(q8.d, 0.5f);
  for (int j = 0; j < 32; ++j) q8.qs[j] = int8_t(j * 7 - 110);
  auto w = decode_block(GgmlType::Q8_0, q8);
  for (int j = 0; j < 32; ++j) CHECK(w[j] == float(j * 7 - 110) * 0.5f);

  // Q4_0: byte j = (low nibble j, high nibble 15 - j): weight j = (j - 8) d, weight j + 16 = (7 - j) d.
  BlockQ4_0 q4{};
  put_half(q4.d, 0.5f);
  for (int j = 0; j < 16; ++j) q4.qs[j] = uint8_t(j | (15 - j) << 4);
  w = decode_block(GgmlType::Q4_0, q4);
  for (int j = 0; j < 16; ++j) {
    CHECK(w[j] == float(j - 8) * 0.5f);
    CHECK(w[j + 16] == float(7 - j) * 0.5f);
  }

  BlockQ4_1 q41{};
  put_half(q41.d, 0.25f);
  put_half(q41.m, -1.5f);
  for (int j = 0; j < 16; ++j) q41.qs[j] = uint8_t(((3 * j + 1) & 15) | ((5 * j + 2) & 15) << 4);
  w = decode_block(GgmlType::Q4_1, q41);
  for (int j = 0; j < 16; ++j) {
    CHECK(w[j] == float((3 * j + 1) & 15) * 0.25f - 1.5f);
    CHECK(w[j + 16] == float((5 * j + 2) & 15) * 0.25f - 1.5f);
  }
}

TEST_CASE("Q5_0 / Q5_1: fifth bit of weight e is bit e of the little-endian qh word") {
  // Literal: only weight 17's high bit set (qh bit 17 = byte 2, bit 1), all nibbles 0.
  BlockQ5_0 lit{};
  put_half(lit.d, 1.0f);
  lit.qh[2] = 0x02;
  auto w = decode_block(GgmlType::Q5_0, lit);
  for (int e = 0; e < 32; ++e) CHECK(w[e] == (e == 17 ? 0.f : -16.f));

  std::vector<int> codes(32);
  for (int e = 0; e < 32; ++e) codes[e] = (7 * e + 3) % 32;
  BlockQ5_0 b0{};
  BlockQ5_1 b1{};
  put_half(b0.d, 0.5f);
  put_half(b1.d, 0.25f);
  put_half(b1.m, 2.0f);
  for (int e = 0; e < 32; ++e) {
    const uint8_t nib = uint8_t((codes[e] & 15) << (e < 16 ? 0 : 4));
    b0.qs[e % 16] |= nib;
    b1.qs[e % 16] |= nib;
    b0.qh[e / 8] |= uint8_t((codes[e] >> 4) << (e % 8));
    b1.qh[e / 8] |= uint8_t((codes[e] >> 4) << (e % 8));
  }
  w = decode_block(GgmlType::Q5_0, b0);
  auto w1 = decode_block(GgmlType::Q5_1, b1);
  for (int e = 0; e < 32; ++e) {
    CHECK(w[e] == float(codes[e] - 16) * 0.5f);
    CHECK(w1[e] == float(codes[e]) * 0.25f + 2.0f);
  }
}

TEST_CASE("Q2_K literal block and random codes") {
  // Literal: d = 1, dmin = 0.5; only sub-block 13 has scale 2 / min 3; weight 210 (half 1, byte 32 + 18, shift 4)
  // has code 3: w = 2 * 3 - 1.5; the rest of sub-block 13 is -1.5, everything else 0.
  BlockQ2_K lit{};
  put_half(lit.d, 1.0f);
  put_half(lit.dmin, 0.5f);
  lit.scales[13] = 0x32;
  lit.qs[50] = 0x30;
  auto w = decode_block(GgmlType::Q2_K, lit);
  for (int e = 0; e < 256; ++e) {
    const float want = e == 210 ? 4.5f : (e / 16 == 13 ? -1.5f : 0.f);
    CHECK_MESSAGE(w[e] == want, "weight ", e);
  }

  std::mt19937 rng(21);
  BlockQ2_K b{};
  put_half(b.d, 0.5f);
  put_half(b.dmin, 0.25f);
  int code[256], sc[16], mn[16];
  for (int s = 0; s < 16; ++s) {
    sc[s] = int(rng() % 16);
    mn[s] = int(rng() % 16);
    b.scales[s] = uint8_t(sc[s] | mn[s] << 4);
  }
  for (int e = 0; e < 256; ++e) {
    code[e] = int(rng() % 4);
    b.qs[32 * (e / 128) + e % 32] |= uint8_t(code[e] << (2 * ((e % 128) / 32)));
  }
  w = decode_block(GgmlType::Q2_K, b);
  for (int e = 0; e < 256; ++e)
    CHECK_MESSAGE(w[e] == 0.5f * float(sc[e / 16] * code[e]) - 0.25f * float(mn[e / 16]), "weight ", e);
}

TEST_CASE("Q3_K literal block and random codes") {
  // Literal, d = 1, all scale codes 0 (scale -32) and hmask 0 (every code -4): every weight is 128, except
  //  - weight 67: high bit set (hmask[3] bit 2) -> code 0 -> 0;
  //  - weight 229 (half 1, byte 32 + 5, shift 6): low bits 1 -> code -3 -> 96;
  //  - sub-block 6: high scale bits 01 (scales[10] bits 2-3) -> scale code 16 -> scale -16 -> 64.
  BlockQ3_K lit{};
  put_half(lit.d, 1.0f);
  lit.hmask[3] = 0x04;
  lit.qs[37] = 0x40;
  lit.scales[10] = 0x04;
  auto w = decode_block(GgmlType::Q3_K, lit);
  for (int e = 0; e < 256; ++e) {
    const float want = e == 67 ? 0.f : e == 229 ? 96.f : (e / 16 == 6 ? 64.f : 128.f);
    CHECK_MESSAGE(w[e] == want, "weight ", e);
  }

  std::mt19937 rng(31);
  BlockQ3_K b{};
  put_half(b.d, 0.5f);
  int q[256], sc[16];
  for (int s = 0; s < 16; ++s) {
    sc[s] = int(rng() % 64);
    if (s < 8)
      b.scales[s] |= uint8_t(sc[s] & 15);
    else
      b.scales[s - 8] |= uint8_t((sc[s] & 15) << 4);
    b.scales[8 + s % 4] |= uint8_t((sc[s] >> 4) << (2 * (s / 4)));
  }
  for (int e = 0; e < 256; ++e) {
    q[e] = int(rng() % 8) - 4;
    const int v = q[e] + 4;
    b.hmask[e % 32] |= uint8_t((v >> 2) << (e / 32));
    b.qs[32 * (e / 128) + e % 32] |= uint8_t((v & 3) << (2 * ((e % 128) / 32)));
  }
  w = decode_block(GgmlType::Q3_K, b);
  for (int e = 0; e < 256; ++e) CHECK_MESSAGE(w[e] == 0.5f * float((sc[e / 16] - 32) * q[e]), "weight ", e);
}

namespace {
// Packs 6-bit scale / min codes the way the Q4_K / Q5_K layout comment describes.
void pack_k4_scales(uint8_t* scales, const int* sc, const int* mn) {
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      scales[s] |= uint8_t(sc[s] & 63);
      scales[s + 4] |= uint8_t(mn[s] & 63);
    } else {
      scales[s + 4] |= uint8_t((sc[s] & 15) | (mn[s] & 15) << 4);
      scales[s - 4] |= uint8_t((sc[s] >> 4) << 6);
      scales[s] |= uint8_t((mn[s] >> 4) << 6);
    }
  }
}
}  // namespace

TEST_CASE("Q4_K literal block (a high sub-block's scale and min use the packed top bits)") {
  // d = 1, dmin = 0.5. Sub-block 5: scale = scales[9].lo | (scales[1] >> 6) << 4 = 1 | 3 << 4 = 49,
  // min = scales[9].hi | (scales[5] >> 6) << 4 = 3 | 2 << 4 = 35. Weight 160 (chunk 2, high nibble of qs[64]) = 2.
  // All other scale and min codes are 0 (scales[1] & 63 == 0, scales[5] & 63 == 0).
  BlockQ4_K lit{};
  put_half(lit.d, 1.0f);
  put_half(lit.dmin, 0.5f);
  lit.scales[1] = 0xC0;
  lit.scales[5] = 0x80;
  lit.scales[9] = 0x31;
  lit.qs[64] = 0x20;
  const auto w = decode_block(GgmlType::Q4_K, lit);
  for (int e = 0; e < 256; ++e) {
    const float want = e == 160 ? 49.f * 2 - 17.5f : (e / 32 == 5 ? -17.5f : 0.f);
    CHECK_MESSAGE(w[e] == want, "weight ", e);
  }
}

TEST_CASE("Q4_K / Q5_K random codes") {
  std::mt19937 rng(45);
  int sc[8], mn[8], code[256];
  for (int s = 0; s < 8; ++s) {
    sc[s] = int(rng() % 64);
    mn[s] = int(rng() % 64);
  }
  for (int e = 0; e < 256; ++e) code[e] = int(rng() % 32);

  BlockQ4_K b4{};
  BlockQ5_K b5{};
  put_half(b4.d, 0.5f);
  put_half(b4.dmin, 0.25f);
  put_half(b5.d, 0.5f);
  put_half(b5.dmin, 0.25f);
  pack_k4_scales(b4.scales, sc, mn);
  pack_k4_scales(b5.scales, sc, mn);
  for (int e = 0; e < 256; ++e) {
    const int byte = 32 * (e / 64) + e % 32, shift = 4 * ((e % 64) / 32);
    b4.qs[byte] |= uint8_t((code[e] & 15) << shift);
    b5.qs[byte] |= uint8_t((code[e] & 15) << shift);
    b5.qh[e % 32] |= uint8_t((code[e] >> 4) << (e / 32));
  }
  const auto w4 = decode_block(GgmlType::Q4_K, b4);
  const auto w5 = decode_block(GgmlType::Q5_K, b5);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    CHECK_MESSAGE(w4[e] == 0.5f * float(sc[s] * (code[e] & 15)) - 0.25f * float(mn[s]), "weight ", e);
    CHECK_MESSAGE(w5[e] == 0.5f * float(sc[s] * code[e]) - 0.25f * float(mn[s]), "weight ", e);
  }
}

TEST_CASE("Q6_K literal block and random codes") {
  // Literal, d = 0.5, all codes -32: sub-block 9 has scale -3 -> 48; weight 226 (half 1, r = 3: high nibble of
  // ql[64 + 32 + 2], bits 6-7 of qh[32 + 2]) has code 63 - 32 = 31 with scale 2 -> 31; the rest of sub-block 14 -> -32.
  BlockQ6_K lit{};
  put_half(lit.d, 0.5f);
  lit.scales[9] = -3;
  lit.scales[14] = 2;
  lit.ql[98] = 0xF0;
  lit.qh[34] = 0xC0;
  auto w = decode_block(GgmlType::Q6_K, lit);
  for (int e = 0; e < 256; ++e) {
    const float want = e == 226 ? 31.f : e / 16 == 14 ? -32.f : e / 16 == 9 ? 48.f : 0.f;
    CHECK_MESSAGE(w[e] == want, "weight ", e);
  }

  std::mt19937 rng(61);
  BlockQ6_K b{};
  put_half(b.d, 0.25f);
  int q[256];
  for (int s = 0; s < 16; ++s) b.scales[s] = int8_t(int(rng() % 256) - 128);
  for (int e = 0; e < 256; ++e) {
    q[e] = int(rng() % 64) - 32;
    const int v = q[e] + 32, h = e / 128, r = (e % 128) / 32, l = e % 32;
    b.ql[64 * h + 32 * (r & 1) + l] |= uint8_t((v & 15) << (4 * (r >> 1)));
    b.qh[32 * h + l] |= uint8_t((v >> 4) << (2 * r));
  }
  w = decode_block(GgmlType::Q6_K, b);
  for (int e = 0; e < 256; ++e) CHECK_MESSAGE(w[e] == 0.25f * float(b.scales[e / 16] * q[e]), "weight ", e);
}

// The table formats. Tables spelled out here from ggml's definitions (kvalues_iq4nl; kvalues_mxfp4 = E2M1 doubled),
// independently of quant_blocks.h.
namespace {
constexpr int kIq4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr float kE2M1[16] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
}  // namespace

TEST_CASE("IQ4_NL literal block and random codes") {
  // Byte j = (low nibble j, high nibble 15 - j): weight j = d * table[j], weight j + 16 = d * table[15 - j].
  BlockIQ4_NL lit{};
  put_half(lit.d, 0.5f);
  for (int j = 0; j < 16; ++j) lit.qs[j] = uint8_t(j | (15 - j) << 4);
  auto w = decode_block(GgmlType::IQ4_NL, lit);
  for (int j = 0; j < 16; ++j) {
    CHECK(w[j] == 0.5f * float(kIq4Table[j]));
    CHECK(w[j + 16] == 0.5f * float(kIq4Table[15 - j]));
  }
  CHECK(w[0] == -63.5f);
  CHECK(w[16] == 56.5f);

  std::mt19937 rng(41);
  BlockIQ4_NL b{};
  const float d = greta::fp16_to_fp32(greta::fp32_to_fp16(0.0123f));
  put_half(b.d, d);
  int q[32];
  for (int e = 0; e < 32; ++e) {
    q[e] = int(rng() % 16);
    b.qs[e % 16] |= uint8_t(q[e] << (e < 16 ? 0 : 4));
  }
  w = decode_block(GgmlType::IQ4_NL, b);
  for (int e = 0; e < 32; ++e) CHECK_MESSAGE(w[e] == d * float(kIq4Table[q[e]]), "weight ", e);
}

TEST_CASE("IQ4_XS literal block and random codes (6-bit scales split over scales_l and scales_h)") {
  // Literal, d = 1, every code 8 (table value 1): scales_h = 0x8001 (bytes 01 80) gives sub-block 0 the high bits 01
  // (code 16: scale -16) and sub-block 7 the high bits 10 (code 32: scale 0); scales_l[2] = 0x5F gives sub-block 4 the
  // low nibble 15 (code 15: -17) and sub-block 5 the low nibble 5 (code 5: -27); the others have code 0 (-32).
  BlockIQ4_XS lit{};
  put_half(lit.d, 1.0f);
  lit.scales_h[0] = 0x01;
  lit.scales_h[1] = 0x80;
  lit.scales_l[2] = 0x5F;
  for (auto& q : lit.qs) q = 0x88;
  auto w = decode_block(GgmlType::IQ4_XS, lit);
  const float want_scale[8] = {-16, -32, -32, -32, -17, -27, -32, 0};
  for (int e = 0; e < 256; ++e) CHECK_MESSAGE(w[e] == want_scale[e / 32], "weight ", e);

  std::mt19937 rng(43);
  BlockIQ4_XS b{};
  put_half(b.d, 0.125f);
  int ls[8], q[256];
  uint16_t scales_h = 0;
  for (int s = 0; s < 8; ++s) {
    ls[s] = int(rng() % 64);
    b.scales_l[s / 2] |= uint8_t((ls[s] & 15) << (4 * (s % 2)));
    scales_h |= uint16_t((ls[s] >> 4) << (2 * s));
  }
  b.scales_h[0] = uint8_t(scales_h);
  b.scales_h[1] = uint8_t(scales_h >> 8);
  for (int e = 0; e < 256; ++e) {
    q[e] = int(rng() % 16);
    const int s = e / 32, l = e % 32;
    b.qs[16 * s + l % 16] |= uint8_t(q[e] << (l < 16 ? 0 : 4));
  }
  w = decode_block(GgmlType::IQ4_XS, b);
  for (int e = 0; e < 256; ++e)
    CHECK_MESSAGE(w[e] == (0.125f * float(ls[e / 32] - 32)) * float(kIq4Table[q[e]]), "weight ", e);
}

TEST_CASE("MXFP4 literal blocks: E2M1 codes times the E8M0 power of two, including the extreme exponents") {
  // e = 127 (scale 2^0): the table's values halved are the E2M1 values themselves.
  BlockMXFP4 lit{};
  lit.e = 127;
  for (int j = 0; j < 16; ++j) lit.qs[j] = uint8_t(j | (15 - j) << 4);
  auto w = decode_block(GgmlType::MXFP4, lit);
  for (int j = 0; j < 16; ++j) {
    CHECK(w[j] == kE2M1[j]);
    CHECK(w[j + 16] == kE2M1[15 - j]);
  }
  // Every exponent, including e = 0 and 1 (subnormal results) and 254 / 255: w = E2M1 * 2^(e - 127).
  for (int e = 0; e < 256; ++e) {
    lit.e = uint8_t(e);
    w = decode_block(GgmlType::MXFP4, lit);
    for (int j = 0; j < 16; ++j) REQUIRE_MESSAGE(w[j] == std::ldexp(kE2M1[j], e - 127), "e ", e, " code ", j);
  }
  lit.e = 0;
  w = decode_block(GgmlType::MXFP4, lit);
  CHECK(w[1] == std::ldexp(1.f, -128));  // 2^-128: a subnormal float
}

TEST_CASE("table-format quantizers: exact inputs round-trip exactly; scales and codes as documented") {
  // MXFP4: values on the grid of one exponent, the largest magnitude 6 * 2^k present: e = 127 + k, exact.
  std::mt19937 rng(47);
  for (int k : {-3, 0, 5}) {
    std::vector<float> x(64);
    for (auto& v : x) v = std::ldexp(kE2M1[rng() % 16], k);
    x[7] = std::ldexp(-6.f, k);
    x[40] = std::ldexp(6.f, k);
    const auto bytes = encode(GgmlType::MXFP4, x);
    CHECK(bytes[0] == 127 + k);
    CHECK(bytes[17] == 127 + k);
    CHECK(decode(GgmlType::MXFP4, bytes.data(), x.size()) == x);
  }
  // MXFP4 ties go to the smaller magnitude (ggml's first-best rule), at scale 2^0: 1.25 -> 1, -5 -> -4.
  {
    std::vector<float> x(32, 0.f);
    x[0] = 6.f;  // e = 127
    x[1] = 1.25f;
    x[2] = -5.f;  // between 4 and 6
    const auto back = decode(GgmlType::MXFP4, encode(GgmlType::MXFP4, x).data(), 32);
    CHECK(back[1] == 1.f);
    CHECK(back[2] == -4.f);
  }
  // IQ4_NL: d * table values with an fp16 d, both ends of the table present: the search finds d exactly.
  for (float d0 : {0.01f, 0.37f}) {
    const float d = greta::fp16_to_fp32(greta::fp32_to_fp16(d0));
    std::vector<float> x(96);
    for (auto& v : x) v = d * float(kIq4Table[rng() % 16]);
    x[3] = d * -127.f;
    x[35] = d * -127.f;
    x[70] = d * -127.f;
    CHECK(decode(GgmlType::IQ4_NL, encode(GgmlType::IQ4_NL, x).data(), x.size()) == x);
  }
  // IQ4_XS: sub-block scales that are multiples of d: exact too (d = -(largest scale) / 32).
  {
    const float d = 0.0625f;
    const int l[8] = {-32, -5, 7, 31, -1, 12, -20, 3};
    std::vector<float> x(256);
    for (int e = 0; e < 256; ++e) x[e] = d * float(l[e / 32]) * float(kIq4Table[rng() % 16]);
    for (int s = 0; s < 8; ++s) x[32 * s + 5] = d * float(l[s]) * -127.f;
    const auto bytes = encode(GgmlType::IQ4_XS, x);
    CHECK(greta::fp16_to_fp32(uint16_t(bytes[0] | bytes[1] << 8)) == d);  // sub-block 0's scale is -32 d
    CHECK(decode(GgmlType::IQ4_XS, bytes.data(), x.size()) == x);
  }
}

// ---- round trips ---------------------------------------------------------------------------------------------------

TEST_CASE("every supported type quantizes; quantize -> dequantize round trips within its NMSE bound") {
  for (GgmlType t : kAllTypes) {
    REQUIRE(can_quantize(t));
    const int64_t n = test_row_length(t);
    double worst = 0;
    for (uint32_t seed : {1u, 2u, 3u}) {
      for (int rows : {1, 3, 5}) {
        const auto x = random_floats(size_t(n * rows), seed * 100 + uint32_t(rows));
        const auto bytes = encode(t, x);
        REQUIRE(bytes.size() == size_t(rows) * row_bytes(t, uint64_t(n)));
        // Row by row, as a matmul reads them: each row's bytes decode alone.
        std::vector<float> back(x.size());
        for (int r = 0; r < rows; ++r)
          dequantize_row(t, bytes.data() + r * row_bytes(t, uint64_t(n)), back.data() + r * n, n);
        worst = std::max(worst, nmse(back.data(), x.data(), x.size()));
      }
    }
    INFO("type ", type_name(t), " worst NMSE ", worst);
    if (t == GgmlType::F32) {
      CHECK(worst == 0);
    } else {
      CHECK(worst < roundtrip_bound(t));
      CHECK(worst > roundtrip_bound(t) / 20);  // the data really went through the quantizer
    }
  }
}

TEST_CASE("F16 / BF16 round trips are exact for representable values") {
  std::mt19937 rng(5);
  std::vector<float> f16_vals, bf16_vals;
  while (f16_vals.size() < 999) {
    const float v = greta::fp16_to_fp32(uint16_t(rng()));
    if (std::isfinite(v)) f16_vals.push_back(v);
  }
  while (bf16_vals.size() < 999) {
    const float v = greta::bf16_to_fp32(uint16_t(rng()));
    if (std::isfinite(v)) bf16_vals.push_back(v);
  }
  const auto f16_back = decode(GgmlType::F16, encode(GgmlType::F16, f16_vals).data(), f16_vals.size());
  const auto bf16_back = decode(GgmlType::BF16, encode(GgmlType::BF16, bf16_vals).data(), bf16_vals.size());
  CHECK(std::memcmp(f16_back.data(), f16_vals.data(), 4 * f16_vals.size()) == 0);
  CHECK(std::memcmp(bf16_back.data(), bf16_vals.data(), 4 * bf16_vals.size()) == 0);
  // And F32 is a byte copy, NaN payloads included.
  auto f32_vals = random_floats(77, 9, -1e30f, 1e30f);
  f32_vals[5] = std::numeric_limits<float>::quiet_NaN();
  f32_vals[6] = -std::numeric_limits<float>::infinity();
  const auto f32_back = decode(GgmlType::F32, encode(GgmlType::F32, f32_vals).data(), f32_vals.size());
  CHECK(std::memcmp(f32_back.data(), f32_vals.data(), 4 * f32_vals.size()) == 0);
}

TEST_CASE("Q8_0 / Q4_0 quantizers: scale from the signed absmax, codes round as in ggml") {
  // One block whose largest-magnitude value is negative: Q4_0 then has d = max / -8 > 0 and that value gets code 0.
  auto x = random_floats(32, 77);
  x[11] = -2.0f;
  const auto q4 = encode(GgmlType::Q4_0, x);
  CHECK(greta::fp16_to_fp32(uint16_t(q4[0] | q4[1] << 8)) == 0.25f);
  CHECK((q4[2 + 11] & 0x0F) == 0);
  const auto q8 = encode(GgmlType::Q8_0, x);
  CHECK(greta::fp16_to_fp32(uint16_t(q8[0] | q8[1] << 8)) == greta::fp16_to_fp32(greta::fp32_to_fp16(2.0f / 127)));
  CHECK(int8_t(q8[2 + 11]) == -127);
  for (int j = 0; j < 32; ++j) CHECK(int8_t(q8[2 + j]) == int(std::round(x[j] * (127 / 2.0f))));
}

TEST_CASE("blocks of zeros and extreme inputs quantize without crashing") {
  for (GgmlType t : kAllTypes) {
    const int64_t n = traits(t).block_elems == 1 ? 64 : 512;
    INFO("type ", type_name(t));
    // Half zeros, half random: the zero blocks must decode to exact zeros, the rest stays accurate.
    auto x = random_floats(size_t(n), 8);
    std::fill(x.begin(), x.begin() + n / 2, 0.f);
    const auto back = decode(t, encode(t, x).data(), size_t(n));
    for (int64_t i = 0; i < n / 2; ++i) REQUIRE(back[i] == 0.f);
    CHECK(nmse(back.data() + n / 2, x.data() + n / 2, size_t(n / 2)) < std::max(roundtrip_bound(t), 1e-12) * 3);
    // Constant blocks, huge, tiny (subnormal), Inf and NaN values: no crash, no undefined behaviour (UBSan build).
    std::vector<float> odd(size_t(n), 0.75f);
    odd[1] = 1e30f;
    odd[2] = 1e-40f;
    odd[n - 1] = std::numeric_limits<float>::infinity();
    odd[n - 2] = std::numeric_limits<float>::quiet_NaN();
    const auto odd_back = decode(t, encode(t, odd).data(), size_t(n));
    CHECK(odd_back.size() == size_t(n));
  }
}

// ---- dot_row -------------------------------------------------------------------------------------------------------

TEST_CASE("dot_row equals the dot product of the dequantized row, at any alignment") {
  for (GgmlType t : kAllTypes) {
    INFO("type ", type_name(t));
    const uint32_t be = traits(t).block_elems;
    for (int64_t n : {int64_t(be == 1 ? 1 : be), int64_t(be == 1 ? 517 : be * 9), int64_t(be == 1 ? 9000 : be * 37)}) {
      const auto w_src = random_floats(size_t(n), uint32_t(n) * 3 + 1, -2.f, 2.f);
      const auto x = random_floats(size_t(n), uint32_t(n) * 3 + 2);
      const auto bytes = encode(t, w_src);
      const auto w = decode(t, bytes.data(), size_t(n));
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += double(w[i]) * x[i];
        mag += std::fabs(double(w[i]) * x[i]);
      }
      const float got = dot_row(t, bytes.data(), x.data(), n);
      CHECK(std::fabs(got - ref) <= 1e-6 * mag + 1e-30);
      // The same row at an odd address: identical results (blocks are read byte-wise).
      std::vector<uint8_t> shifted(bytes.size() + 1);
      std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
      CHECK(dot_row(t, shifted.data() + 1, x.data(), n) == got);
      const auto w_shifted = decode(t, shifted.data() + 1, size_t(n));
      CHECK(std::memcmp(w_shifted.data(), w.data(), 4 * size_t(n)) == 0);
    }
  }
}

TEST_CASE("codecs reject bad lengths and unsupported types with greta::Error") {
  std::vector<uint8_t> bytes(4096);
  std::vector<float> f(1024, 0.5f);
  CHECK_THROWS_AS(dequantize_row(GgmlType::Q4_K, bytes.data(), f.data(), 100), greta::Error);
  CHECK_THROWS_AS(dequantize_row(GgmlType::Q8_0, bytes.data(), f.data(), -32), greta::Error);
  CHECK_THROWS_AS(dot_row(GgmlType::Q6_K, bytes.data(), f.data(), 255), greta::Error);
  CHECK_THROWS_AS(quantize_row(GgmlType::Q4_0, f.data(), bytes.data(), 33), greta::Error);
  CHECK_THROWS_AS(dequantize_row(GgmlType::Q8_K, bytes.data(), f.data(), 256), greta::Error);
  CHECK_THROWS_AS(quantize_row(GgmlType::Q8_1, f.data(), bytes.data(), 32), greta::Error);
  CHECK_THROWS_AS(dequantize_row(static_cast<GgmlType>(99), bytes.data(), f.data(), 32), greta::Error);
  CHECK(!can_quantize(GgmlType::Q8_K));
  try {
    dequantize_row(GgmlType::Q4_K, bytes.data(), f.data(), 100);
  } catch (const greta::Error& e) {
    CHECK(std::string(e.what()).find("q4_K") != std::string::npos);
  }
  dequantize_row(GgmlType::Q4_K, nullptr, nullptr, 0);  // empty rows are fine
  CHECK(dot_row(GgmlType::Q4_0, nullptr, nullptr, 0) == 0.f);
}

// ---- llama.cpp's files ---------------------------------------------------------------------------------------------

namespace {

// Per-tensor NMSE of a llama.cpp-quantized tensor against the F32 original. The values are deterministic (fixed
// files); bounds are ~1.3x the worst tensor measured (worst: F16 4.4e-8, BF16 2.8e-6, Q8_0 3.8e-5, Q6_K 3.3e-4,
// Q5_K 1.3e-3, Q5_1 1.5e-3, Q5_0 1.9e-3, Q4_K 5.2e-3, Q4_1 6.3e-3, Q4_0 9.2e-3 (stories260K's trained attn_v),
// Q3_K 2.4e-2, Q2_K 8.9e-2; next/'s IQ4_NL 5.9e-3, IQ4_XS 6.0e-3).
double file_bound(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 6e-8;
    case GgmlType::BF16: return 4e-6;
    case GgmlType::Q8_0: return 5e-5;
    case GgmlType::Q6_K: return 4.5e-4;
    case GgmlType::Q5_K: return 1.8e-3;
    case GgmlType::Q5_1: return 2e-3;
    case GgmlType::Q5_0: return 2.5e-3;
    case GgmlType::Q4_K: return 7e-3;
    case GgmlType::Q4_1: return 8e-3;
    case GgmlType::Q4_0: return 1.2e-2;
    case GgmlType::Q3_K: return 3.1e-2;
    case GgmlType::Q2_K: return 0.115;
    case GgmlType::IQ4_NL: return 7.8e-3;
    case GgmlType::IQ4_XS: return 7.8e-3;
    default: return 0;
  }
}

struct FileReport {
  int tensors = 0;
  int64_t blocks = 0;
  int64_t differing_blocks = 0;
};

// Checks every tensor of `quant` against the same tensor in `ref` (F32): decode NMSE within the type's bound, and
// re-quantizing the F32 rows with the tensor's own type reproduces the file's bytes.
FileReport check_against_f32(const GgufFile& quant, const GgufFile& ref) {
  FileReport rep;
  for (const auto& t : quant.tensors()) {
    const std::string name(t.name);
    INFO("tensor ", name, " (", type_name(t.type), ")");
    const GgufTensor* r = ref.find_tensor(t.name);
    REQUIRE(r != nullptr);
    REQUIRE(r->type == GgmlType::F32);
    REQUIRE(r->dims == t.dims);
    const int64_t n = int64_t(t.row_length());
    const uint64_t qbytes = row_bytes(t.type, uint64_t(n));
    const auto& tr = traits(t.type);
    std::vector<float> deq(static_cast<size_t>(n)), src(static_cast<size_t>(n));
    std::vector<uint8_t> mine(qbytes);
    double num = 0, den = 0;
    for (uint64_t row = 0; row < t.rows(); ++row) {
      const uint8_t* qrow = t.data + row * qbytes;
      dequantize_row(t.type, qrow, deq.data(), n);
      std::memcpy(src.data(), r->data + row * uint64_t(n) * 4, size_t(n) * 4);
      for (int64_t i = 0; i < n; ++i) {
        const double d = double(deq[i]) - src[i];
        num += d * d;
        den += double(src[i]) * src[i];
      }
      quantize_row(t.type, src.data(), mine.data(), n);
      for (uint64_t b = 0; b < qbytes / tr.block_bytes; ++b) {
        ++rep.blocks;
        if (std::memcmp(mine.data() + b * tr.block_bytes, qrow + b * tr.block_bytes, tr.block_bytes) != 0)
          ++rep.differing_blocks;
      }
    }
    const double e = den > 0 ? num / den : num;
    INFO("NMSE ", e);
    if (t.type == GgmlType::F32)
      CHECK(e == 0);
    else
      CHECK(e < file_bound(t.type));
    ++rep.tensors;
  }
  return rep;
}

}  // namespace

TEST_CASE("synth-llama-d256 files: every tensor decodes close to F32, and re-quantizing reproduces llama.cpp's bytes") {
  namespace fs = std::filesystem;
  const fs::path dir = greta::test::shared_path("models");
  const std::string prefix = "synth-llama-d256-";
  const GgufFile ref = GgufFile::open((dir / (prefix + "f32.gguf")).string());
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 5 && name.ends_with(".gguf") && name != prefix + "f32.gguf")
      files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 13);  // f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k_s q4_k_s q5_k_s q6_k q4_k_m
  std::vector<GgmlType> seen;
  for (const auto& name : files) {
    INFO("file ", name);
    const GgufFile quant = GgufFile::open((dir / name).string());
    for (const auto& t : quant.tensors()) seen.push_back(t.type);
    const FileReport rep = check_against_f32(quant, ref);
    MESSAGE(name, ": ", rep.tensors, " tensors, ", rep.differing_blocks, " of ", rep.blocks,
            " re-quantized blocks differ from llama.cpp's");
    CHECK(rep.tensors > 0);
    CHECK(rep.differing_blocks == 0);
  }
  // Every quantized type was exercised by some file.
  for (GgmlType t : kFileTypes) CHECK_MESSAGE(std::find(seen.begin(), seen.end(), t) != seen.end(), type_name(t));
}

TEST_CASE("next/ IQ4_NL / IQ4_XS files (llama-quantize --pure): every tensor decodes close to the F32 model") {
  // The same synthetic llama as models/synth-llama-d256-f32.gguf, every matrix (embeddings and output too) in the
  // named type. Our quantizers are not ggml's search, so their bytes may differ; the count is reported.
  const GgufFile ref = GgufFile::open(greta::test::shared_path("models/synth-llama-d256-f32.gguf"));
  for (const std::string variant : {"iq4_nl", "iq4_xs"}) {
    INFO("variant ", variant);
    const GgufFile quant = GgufFile::open(greta::test::shared_path("next/models/synth-llama-d256-" + variant + ".gguf"));
    int quantized = 0;
    for (const auto& t : quant.tensors()) quantized += t.type == *type_from_name(variant) ? 1 : 0;
    CHECK(quantized >= 14);  // 7 matrices in each of 2 layers, plus token_embd and output
    const FileReport rep = check_against_f32(quant, ref);
    MESSAGE("synth-llama-d256-", variant, ": ", rep.tensors, " tensors, ", rep.differing_blocks, " of ", rep.blocks,
            " re-quantized blocks differ from llama.cpp's");
  }
}

TEST_CASE("stories260K f16 / q8_0 / q4_0 against the F32 model") {
  const GgufFile ref = GgufFile::open(greta::test::shared_path("models/stories260K.gguf"));
  for (const std::string variant : {"f16", "q8_0", "q4_0"}) {
    INFO("variant ", variant);
    const GgufFile quant =
        GgufFile::open(greta::test::shared_path("models/stories260K-" + variant + ".gguf"));
    const FileReport rep = check_against_f32(quant, ref);
    MESSAGE("stories260K-", variant, ": ", rep.tensors, " tensors, ", rep.differing_blocks, " of ", rep.blocks,
            " re-quantized blocks differ");
    CHECK(rep.tensors > 0);
    CHECK(rep.differing_blocks == 0);
  }
}
