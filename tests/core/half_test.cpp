#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"

using namespace greta;

TEST_CASE("fp16 round trip is exact for every half value") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16_to_fp32(uint16_t(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    REQUIRE(fp32_to_fp16(f) == h);
  }
}

TEST_CASE("fp32 -> fp16 rounds to nearest even, overflows to inf, underflows to subnormals") {
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f)) == 1.0f);
  CHECK(fp32_to_fp16(65504.f) == 0x7bff);
  CHECK(fp32_to_fp16(65520.f) == 0x7c00);             // halfway above max rounds to inf
  CHECK(fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00);  // tie -> even (down)
  CHECK(fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02);  // tie -> even (up)
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(fp32_to_fp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  // Against the hardware-independent definition: nearest representable half, checked on a sweep.
  for (float f = -70000.f; f < 70000.f; f += 13.37f) {
    float r = fp16_to_fp32(fp32_to_fp16(f));
    if (std::fabs(f) > 65504.f) continue;
    CHECK(std::fabs(r - f) <= std::fabs(f) * (1.0f / 2048) + 1e-7f);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even") {
  CHECK(bf16_to_fp32(fp32_to_bf16(1.5f)) == 1.5f);
  float x = 1.0f + 1.0f / 256;  // exactly halfway between two bf16 values -> even (1.0)
  CHECK(fp32_to_bf16(x) == 0x3f80);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}
