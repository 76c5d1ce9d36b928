// Embedding lookup: one dequantized table row per token (any weight type, through the reference dequantizer).
#include <cstring>

#include "core/error.h"
#include "cpu/ops.h"
#include "model/quants.h"

namespace greta::cpu {

void embed(ThreadPool& pool, const WeightView& table, const int32_t* tokens, int64_t n_tokens, float* out) {
  const int64_t dim = table.cols;
  for (int64_t t = 0; t < n_tokens; ++t)  // validate up front: a bad id is a user error, not a crash in a worker
    if (tokens[t] < 0 || tokens[t] >= table.rows)
      fail("token id ", tokens[t], " is out of range (vocabulary of ", table.rows, ")");
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const uint8_t* row = table.row(tokens[t]);
      if (table.type == model::GgmlType::F32)
        std::memcpy(out + t * dim, row, size_t(dim) * sizeof(float));
      else
        model::dequantize_row(table.type, row, out + t * dim, dim);
    }
  });
}

}  // namespace greta::cpu
