// Prefill matmul on matrix cores (MFMA on CDNA, WMMA on RDNA3, mma.sync on NVIDIA): the tile math lives in
// gemm_tile.h (shared with the CPU layout tests); this file holds the kernels and their launch.
//   rows_to_half_kernel: activations [M, K] fp32 -> fp16 with a power-of-two scale per row (gemm::row_scale_for)
//   gemm_kernel<W>:      64 x 64 output tiles, 4 waves, K steps of 32, W decoded to fp16 while staging into LDS
#include "hip/gemm_tile.h"
#include "hip/launch_util.h"

namespace greta::hip {
namespace {

constexpr int kConvThreads = 256;

__global__ void __launch_bounds__(kConvThreads) rows_to_half_kernel(const float* in, int64_t K, half_t* out,
                                                                    float* inv_scale) {
  __shared__ float scratch[kConvThreads / 32];
  const float* x = in + int64_t(blockIdx.x) * K;
  half_t* y = out + int64_t(blockIdx.x) * K;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < K; i += kConvThreads) amax = fmaxf(amax, fabsf(x[i]));
  amax = wave_max(amax);
  if (lane_id() == 0) scratch[wave_id()] = amax;
  __syncthreads();
  for (int w = 0; w < kConvThreads / kWave; ++w) amax = fmaxf(amax, scratch[w]);
  const float s = gemm::row_scale_for(amax);
  for (int64_t i = threadIdx.x; i < K; i += kConvThreads) y[i] = to_half(x[i] * s);
  if (threadIdx.x == 0) inv_scale[blockIdx.x] = 1.f / s;
}

template <WType W>
__global__ void __launch_bounds__(256) gemm_kernel(const half_t* a, const float* inv_scale, const uint8_t* w,
                                                   uint64_t w_row_bytes, float* out, int64_t M, int64_t N,
                                                   int64_t K) {
#if defined(GRETA_HAVE_MMA)
  static_assert(Mma::kLanes == kWave, "matrix instruction and wave size disagree");
  __shared__ half_t lds_a[gemm::kBM * gemm::kLdA];
  __shared__ half_t lds_b[gemm::kBN * gemm::kLdB];
  const int tid = thread_id(), nthreads = gemm::kWaves * kWave, lane = lane_id(), wave = wave_id();
  const int64_t m0 = int64_t(blockIdx.y) * gemm::kBM, n0 = int64_t(blockIdx.x) * gemm::kBN;
  float acc[2][2][Mma::kC];
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 2; ++ni)
      for (int i = 0; i < Mma::kC; ++i) acc[mi][ni][i] = 0.f;
  for (int64_t k0 = 0; k0 < K; k0 += gemm::kBK) {
    gemm::stage_a(tid, nthreads, a, K, M, K, m0, k0, lds_a);
    gemm::stage_b<W>(tid, nthreads, w, w_row_bytes, N, K, n0, k0, lds_b);
    block_barrier();
    gemm::for_each_mma<Mma>(lane, wave, lds_a, lds_b,
                            [&](int mi, int ni, const half_t* af, const half_t* bf) { mma_16x16x16(af, bf, acc[mi][ni]); });
    block_barrier();
  }
  gemm::store_c<Mma>(lane, wave, acc, out, N, M, N, m0, n0, inv_scale);
#endif
}

}  // namespace

void launch_gemm(const LaunchCtx& c, const DeviceWeight& w, const float* in, float* out, int64_t n_tokens,
                 void* a_half, float* inv_scale) {
  GRETA_CHECK(c.mma, "gemm launched on a device without matrix cores");
  if (n_tokens <= 0) return;
  auto* a = static_cast<half_t*>(a_half);
  rows_to_half_kernel<<<blocks_for(n_tokens, 1), kConvThreads, 0, stream_of(c)>>>(in, w.cols, a, inv_scale);
  check_launch("rows_to_half");
  GRETA_CHECK(n_tokens / gemm::kBM < 65535, "gemm of ", n_tokens, " tokens");
  const dim3 grid(blocks_for(w.rows, gemm::kBN), blocks_for(n_tokens, gemm::kBM));
  const unsigned threads = unsigned(gemm::kWaves * c.wave);
  switch (w.type) {
#define GRETA_GEMM_CASE(T)                                                                                         \
  case WType::T:                                                                                                   \
    gemm_kernel<WType::T><<<grid, threads, 0, stream_of(c)>>>(a, inv_scale, w.data, w.row_bytes, out, n_tokens,     \
                                                              w.rows, w.cols);                                     \
    break;
    GRETA_HIP_FOR_EACH_WTYPE(GRETA_GEMM_CASE)
#undef GRETA_GEMM_CASE
  }
  check_launch("gemm");
}

}  // namespace greta::hip
