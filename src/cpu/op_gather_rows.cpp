// Row gather: the rows whose logits a step returns (the last token of each sequence that asked for them).
#include <cstring>

#include "core/error.h"
#include "cpu/ops.h"

namespace greta::cpu {

void gather_rows(const float* in, const int32_t* rows, float* out, int64_t n_rows, int64_t width, int64_t in_rows) {
  for (int64_t r = 0; r < n_rows; ++r) {
    GRETA_CHECK(rows[r] >= 0 && rows[r] < in_rows, "gather row ", rows[r], " outside ", in_rows, " rows");
    std::memmove(out + r * width, in + int64_t(rows[r]) * width, size_t(width) * sizeof(float));
  }
}

}  // namespace greta::cpu
