// KV-cache write: this step's K (or V) rows go to the cache rows the engine chose (pages of their sequences).
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "cpu/ops.h"
#include "engine/kv_q8.h"

namespace greta::cpu {

void kv_write(const float* src, const CacheView& cache, const int32_t* rows, int64_t n_tokens, int64_t width) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t r = rows[t];
    GRETA_CHECK(r >= 0 && r < cache.rows, "KV row ", r, " outside the cache of ", cache.rows, " rows");
    const float* in = src + t * width;
    if (cache.type == engine::ElemType::F16) {
      uint16_t* out = static_cast<uint16_t*>(cache.data) + r * width;
      for (int64_t i = 0; i < width; ++i) out[i] = fp32_to_fp16(in[i]);
    } else if (cache.type == engine::ElemType::Q8_0) {
      GRETA_CHECK(width % engine::kKvQ8Block == 0, "q8_0 KV row of ", width);
      engine::kv_q8_quantize(in, static_cast<uint32_t*>(cache.data) + r * width / engine::kKvQ8Block * engine::kKvQ8Words,
                             width);
    } else {
      std::memcpy(static_cast<float*>(cache.data) + r * width, in, size_t(width) * sizeof(float));
    }
  }
}

}  // namespace greta::cpu
