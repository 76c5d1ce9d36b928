// F16 and Q8_0 buffer contents as floats and back: what Backend::read / write do for buffers of those types (the
// KV caches) once the raw bytes are on the host. F16: round to nearest even; Q8_0: engine/kv_q8.h, whole blocks.
// Inline: every backend uses it, the HIP plugin without the engine library.
#pragma once
#include <cstdint>
#include <span>

#include "core/half.h"
#include "engine/kv_q8.h"
#include "engine/plan.h"

namespace greta::engine {

// dst.size() elements of `type` (F16 or Q8_0) at `raw` (the first element's bytes) into floats.
inline void floats_from_elems(ElemType type, const void* raw, std::span<float> dst) {
  if (type == ElemType::Q8_0) {
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = kv_q8_value(static_cast<const uint32_t*>(raw), int64_t(i));
  } else {
    const auto* bits = static_cast<const uint16_t*>(raw);
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = fp16_to_fp32(bits[i]);
  }
}

// src.size() floats into elements of `type` (F16 or Q8_0) at `raw`.
inline void elems_from_floats(ElemType type, std::span<const float> src, void* raw) {
  if (type == ElemType::Q8_0) {
    kv_q8_quantize(src.data(), static_cast<uint32_t*>(raw), int64_t(src.size()));
  } else {
    auto* bits = static_cast<uint16_t*>(raw);
    for (size_t i = 0; i < src.size(); ++i) bits[i] = fp32_to_fp16(src[i]);
  }
}

}  // namespace greta::engine
