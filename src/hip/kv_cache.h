// KV-cache element access for the attention kernels (k_attention.hip) and the CPU tile tests (tests/hip): a cache is
// read through an accessor whose at(i) returns element i of the flat cache as fp32 (exact for every type):
//   KvF32  float elements
//   KvF16  fp16 elements (device passes only: the CPU tests model fp16 storage with floats)
//   KvQ8   engine::ElemType::Q8_0 (engine/kv_q8.h): a flat array of blocks of 32 elements, 9 uint32 words each:
//            words 0..7  the int8 values, element 4w + b of the block in byte b of word w (two's complement)
//            word 8      the f32 scale d
//          element e = d * q, q the int8 of element e % 32 of block e / 32. A cache row is whole blocks (the plan
//          checks width % 32 == 0), but a head's slice of a row need not be (head_dim 40, 80): at() takes any e.
// row_dot(q, base, n) = sum_i q[i] * at(base + i) with each value dequantized exactly as at() does, in order (Q8:
// the block's scale is loaded once per block instead of once per element).
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/kv_q8.h"
#include "hip/gpu_api.h"

namespace greta::hip {

// The cache element type a kernel is instantiated for (AttentionArgs::cache, launch_kv_write).
enum class KvType : uint8_t { F32, F16, Q8_0 };

inline constexpr int kQ8Block = int(engine::kKvQ8Block);  // elements per block
inline constexpr int kQ8Words = int(engine::kKvQ8Words);  // 32-bit words per block

GRETA_HD GRETA_INLINE float f32_from_bits(uint32_t bits) {
#if defined(GRETA_DEVICE_PASS) && defined(GRETA_GPU_HIP)
  return __builtin_bit_cast(float, bits);
#elif defined(GRETA_DEVICE_PASS)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

GRETA_HD GRETA_INLINE uint32_t f32_to_bits(float f) {
#if defined(GRETA_DEVICE_PASS) && defined(GRETA_GPU_HIP)
  return __builtin_bit_cast(uint32_t, f);
#elif defined(GRETA_DEVICE_PASS)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
#endif
}

// Quantizes x[0..31] into one block (9 words at out) exactly as engine/kv_q8.h's kv_q8_quantize: d = max|x| / 127,
// q = round(x * (1 / d)) with halves away from zero (roundf, like lround), d = 0 -> q = 0. IEEE division on both
// GPU compilers (no fast-math), so the kv write kernel's bytes equal the CPU's.
GRETA_HD GRETA_INLINE void q8_quantize_block(const float* x, uint32_t* out) {
  float amax = 0.f;
  for (int i = 0; i < kQ8Block; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  for (int w = 0; w < 8; ++w) {
    uint32_t word = 0;
    for (int k = 0; k < 4; ++k) word |= (uint32_t(int(roundf(x[4 * w + k] * id))) & 0xffu) << (8 * k);
    out[w] = word;
  }
  out[8] = f32_to_bits(d);
}

struct KvF32 {
  const float* p;
  GRETA_HD GRETA_INLINE float at(int64_t i) const { return p[i]; }
  GRETA_HD GRETA_INLINE float row_dot(const float* q, int64_t base, int64_t n) const {
    float dot = 0.f;
    for (int64_t d = 0; d < n; ++d) dot += q[d] * p[base + d];
    return dot;
  }
};

#if defined(GRETA_GPU)
struct KvF16 {
  const half_t* p;
  __device__ GRETA_INLINE float at(int64_t i) const { return from_half(p[i]); }
  __device__ GRETA_INLINE float row_dot(const float* q, int64_t base, int64_t n) const {
    float dot = 0.f;
    for (int64_t d = 0; d < n; ++d) dot += q[d] * from_half(p[base + d]);
    return dot;
  }
};
#endif

struct KvQ8 {
  const uint32_t* p;
  // The int8 of element i (0..31) of a block.
  GRETA_HD static GRETA_INLINE float q_of(const uint32_t* block, int i) {
    return float(int8_t(uint8_t(block[i >> 2] >> (8 * (i & 3)))));
  }
  GRETA_HD GRETA_INLINE float at(int64_t e) const {
    const uint32_t* block = p + (e / kQ8Block) * kQ8Words;
    return f32_from_bits(block[8]) * q_of(block, int(e % kQ8Block));
  }
  GRETA_HD GRETA_INLINE float row_dot(const float* q, int64_t base, int64_t n) const {
    float dot = 0.f;
    for (int64_t d = 0; d < n;) {
      const int64_t e = base + d;
      const uint32_t* block = p + (e / kQ8Block) * kQ8Words;
      const float scale = f32_from_bits(block[8]);
      const int i0 = int(e % kQ8Block);
      const int64_t count = kQ8Block - i0 < n - d ? kQ8Block - i0 : n - d;
      for (int i = 0; i < count; ++i) dot += q[d + i] * (scale * q_of(block, i0 + i));
      d += count;
    }
    return dot;
  }
};

}  // namespace greta::hip
