#include "core/half.h"

#include <cstring>

namespace greta {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // Inf / NaN
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | ((mant & 0x3ffu) << 13);
    }
  } else {
    bits = sign | (exp + (127 - 15)) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // Inf or NaN (keep a quiet NaN)
    return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to Inf
  if (absx < 0x38800000u) {                                   // below the smallest normal half: subnormal or zero
    if (absx < 0x33000000u) return uint16_t(sign);            // < 2^-25 rounds to zero
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 bits to drop
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15 (in the top bits after >> 13)
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: correct
  return uint16_t(sign | r);
}

uint16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);                                           // round to nearest even
  return uint16_t(x >> 16);
}

}  // namespace greta
