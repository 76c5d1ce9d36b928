// KV-cache write: this step's K (or V) rows go to the cache rows of their positions.
#include <cstring>

#include "core/error.h"
#include "cpu/ops.h"

namespace greta::cpu {

void kv_write(const float* src, float* cache, const int32_t* positions, int64_t n_tokens, int64_t width, int64_t ctx) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t p = positions[t];
    GRETA_CHECK(p >= 0 && p < ctx, "KV position ", p, " outside the cache of ", ctx);
    std::memcpy(cache + p * width, src + t * width, size_t(width) * sizeof(float));
  }
}

}  // namespace greta::cpu
