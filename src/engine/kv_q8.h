// The Q8_0 KV-cache format (engine::ElemType::Q8_0; `--kv-type q8_0`): int8 values per block of 32 with one f32
// scale, 1.125 bytes per element (f16: 2). A cache row holds whole blocks (its width is a multiple of 32), so the
// cache is a flat array of blocks and element e lives in block e / 32:
//   block = 9 32-bit words: words 0..7 the 32 int8 values (element 4w + b of the block in byte b of word w, two's
//   complement), word 8 the scale d (f32 bits); value = d * q.
// Quantization as ggml's q8_0 (d = max|x| / 127, q = round(x / d) with halves away from zero, d = 0 -> q = 0), with
// the scale kept in f32 rather than f16 so that every word is 4-byte aligned for the GPU kernels.
// Inline (no engine library needed): the CPU backend, the HIP plugin's host side and the tests use these.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace greta::engine {

inline constexpr int64_t kKvQ8Block = 32;  // elements per block
inline constexpr int64_t kKvQ8Words = 9;   // 32-bit words per block

inline uint64_t kv_q8_bytes(int64_t elems) { return uint64_t(elems / kKvQ8Block) * kKvQ8Words * 4; }

// Quantizes n elements (n % 32 == 0) into n / 32 blocks.
inline void kv_q8_quantize(const float* x, uint32_t* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kKvQ8Block; ++b, x += kKvQ8Block, blocks += kKvQ8Words) {
    float amax = 0.f;
    for (int64_t i = 0; i < kKvQ8Block; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    for (int64_t w = 0; w < 8; ++w) {
      uint32_t word = 0;
      for (int64_t k = 0; k < 4; ++k) {
        const auto q = static_cast<int8_t>(std::lround(x[4 * w + k] * id));  // halves away from zero
        word |= uint32_t(static_cast<uint8_t>(q)) << (8 * k);
      }
      blocks[w] = word;
    }
    std::memcpy(&blocks[8], &d, 4);
  }
}

// Element e of a flat array of blocks.
inline float kv_q8_value(const uint32_t* blocks, int64_t e) {
  const uint32_t* block = blocks + (e / kKvQ8Block) * kKvQ8Words;
  const int64_t i = e % kKvQ8Block;
  const auto q = static_cast<int8_t>(uint8_t(block[i / 4] >> (8 * (i % 4))));
  float d;
  std::memcpy(&d, &block[8], 4);
  return d * float(q);
}

}  // namespace greta::engine
