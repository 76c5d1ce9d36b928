// IEEE binary16 and bfloat16 <-> float conversions, bit-exact and portable (no _Float16 / F16C dependency), so the
// CPU reference rounds exactly like GPUs and like ggml do (round-to-nearest-even, NaN/Inf preserved).
#pragma once
#include <cstdint>

namespace greta {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

inline float bf16_to_fp32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

}  // namespace greta
