// Decode matmul: out[t, r] = dot(weight row r, in[t, :]) in fp32 with the weight decoded in registers
// (dequant_group16), for up to kMatvecTokens tokens per pass over the weights.
//
// Work split: a block of kWavesPerBlock waves; each wave owns kRowsPerWave consecutive weight rows; for a row, lane l
// decodes the 16-weight groups l, l + wave, l + 2 * wave, ... and multiplies each with the same 16 activations of
// every token; a butterfly reduction over the wave (wave_sum) gives the dot products. The wave size is the device
// pass's (64 on CDNA, 32 on RDNA and NVIDIA); the host sizes the block from the device's reported wave size.
#include "hip/dequant.h"
#include "hip/launch_util.h"

namespace greta::hip {
namespace {

// One row per wave: a decode matvec of a 4096-row matrix is then 1024 blocks of 4 waves (about 31 waves per H100
// SM), so many more weight loads are in flight. Measured on the H100 (7B Q4_0 decode, weights GB/s): 2 rows per wave
// with scalar activation loads 208; 1 row per wave with 16-byte activation loads 515; the same with the group loop
// unrolled 2x / 4x 347 / 453 (register pressure), so it is not unrolled.
constexpr int kRowsPerWave = 1;

// 16-byte activation loads where they are aligned: k0 is a multiple of 16 floats, so rows of a multiple of 4 floats
// starting at a 16-byte aligned `in` (plan buffers are 256-byte aligned) keep every load aligned.
struct alignas(16) Float4 {
  float v[4];
};

template <WType W>
__global__ void __launch_bounds__(256) matvec_kernel(const uint8_t* w, uint64_t row_bytes, int64_t rows, int64_t cols,
                                                     const float* in, float* out, int n_tokens) {
  const int lane = lane_id();
  const int64_t first_row = (int64_t(blockIdx.x) * kWavesPerBlock + wave_id()) * kRowsPerWave;
  const int64_t groups = (cols + 15) / 16;
  const bool vec4 = (cols & 3) == 0 && (reinterpret_cast<uintptr_t>(in) & 15) == 0;
  for (int rr = 0; rr < kRowsPerWave; ++rr) {
    const int64_t r = first_row + rr;
    if (r >= rows) return;
    const uint8_t* row = w + uint64_t(r) * row_bytes;
    float acc[kMatvecTokens];
    for (int t = 0; t < kMatvecTokens; ++t) acc[t] = 0.f;
    for (int64_t g = lane; g < groups; g += kWave) {
      float v[16];
      dequant_group16<W>(row, g * 16, cols, v);
      const int64_t k0 = g * 16;
      const int n_valid = cols - k0 < 16 ? int(cols - k0) : 16;
      for (int t = 0; t < kMatvecTokens; ++t) {
        if (t >= n_tokens) break;
        const float* x = in + int64_t(t) * cols + k0;
        float s = 0.f;
        if (vec4 && n_valid == 16) {
          for (int q = 0; q < 4; ++q) {
            const Float4 f = reinterpret_cast<const Float4*>(x)[q];
            for (int i = 0; i < 4; ++i) s += v[4 * q + i] * f.v[i];
          }
        } else {
          for (int j = 0; j < n_valid; ++j) s += v[j] * x[j];
        }
        acc[t] += s;
      }
    }
    for (int t = 0; t < kMatvecTokens; ++t) {
      if (t >= n_tokens) break;
      const float total = wave_sum(acc[t]);
      if (lane == 0) out[int64_t(t) * rows + r] = total;
    }
  }
}

}  // namespace

void launch_matvec(const LaunchCtx& c, const DeviceWeight& w, const float* in, float* out, int64_t n_tokens) {
  const int64_t rows_per_block = int64_t(kWavesPerBlock) * kRowsPerWave;
  const unsigned grid = blocks_for(w.rows, rows_per_block);
  const unsigned threads = unsigned(kWavesPerBlock * c.wave);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMatvecTokens) {
    const int nt = int(n_tokens - t0 < kMatvecTokens ? n_tokens - t0 : kMatvecTokens);
    const float* x = in + t0 * w.cols;
    float* y = out + t0 * w.rows;
    switch (w.type) {
#define GRETA_MATVEC_CASE(T)                                                                                        \
  case WType::T:                                                                                                    \
    matvec_kernel<WType::T><<<grid, threads, 0, stream_of(c)>>>(w.data, w.row_bytes, w.rows, w.cols, x, y, nt);     \
    break;
      GRETA_HIP_FOR_EACH_WTYPE(GRETA_MATVEC_CASE)
#undef GRETA_MATVEC_CASE
    }
    check_launch("matvec");
  }
}

}  // namespace greta::hip
