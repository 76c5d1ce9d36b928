// Matrix multiplication with a weight of any type: threads split the weight rows (output features); each weight
// row is dequantized once into a per-chunk scratch row and dotted with every token's activations. Decode (1 token)
// and prefill (n tokens) share this code, so each output element is the same dot product either way.
#include <cstdint>
#include <vector>

#include "core/sanitizer.h"
#include "cpu/ops.h"
#include "model/quants.h"

namespace greta::cpu {

namespace {

GRETA_NO_SANITIZE float dot_f32_unchecked(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[i + l] * b[i + l];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]))) + tail;
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
  check_readable(a, size_t(n) * sizeof(float));
  check_readable(b, size_t(n) * sizeof(float));
  return dot_f32_unchecked(a, b, n);
}

void matmul(ThreadPool& pool, const WeightView& w, const float* in, float* out, int64_t n_tokens) {
  const int64_t rows = w.rows, cols = w.cols;
  // F32 rows are used in place when the file's alignment allows reading them as floats.
  const bool in_place = w.type == model::GgmlType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0 &&
                        w.row_bytes % sizeof(float) == 0;
  pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    std::vector<float> scratch;
    if (!in_place) scratch.resize(size_t(cols));
    for (int64_t r = begin; r < end; ++r) {
      const float* wrow;
      if (in_place) {
        wrow = reinterpret_cast<const float*>(w.row(r));
      } else {
        model::dequantize_row(w.type, w.row(r), scratch.data(), cols);
        wrow = scratch.data();
      }
      for (int64_t t = 0; t < n_tokens; ++t) out[t * rows + r] = dot_f32(wrow, in + t * cols, cols);
    }
  }, 16);
}

}  // namespace greta::cpu
