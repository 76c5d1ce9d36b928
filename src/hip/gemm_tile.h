// The prefill GEMM's tile math, shared by the kernel (k_gemm.hip) and the CPU layout tests (tests/hip).
//
//   out[m][n] = sum_k A[m][k] * W[n][k]        m < M tokens, n < N out features, k < K in features
//
// A is the activation matrix converted to fp16 with one power-of-two scale per row (rows_to_half in k_gemm.hip:
// exact to undo, keeps every row's largest value near 2^14 so fp16 neither overflows nor loses small rows to
// subnormals); W is the weight in its stored format, decoded to fp16 while staging. Accumulation is fp32 on the
// matrix cores.
//
// Blocking: a block of 4 waves computes a kBM x kBN = 64 x 64 tile of `out`, stepping K by kBK = 32:
//   1. stage_a: the 64 x 32 fp16 slice of A -> LDS lds_a[m][k]  ("mk", row pitch kLdA)
//   2. stage_b: rows n0..n0+63 of W, k0..k0+31, decoded 16 at a time -> LDS lds_b[n][k] ("nk", pitch kLdB): the
//      weight keeps its row-major [out][in] order, so B[k][n] = lds_b[n][k] (load_b_nk)
//   3. every wave multiplies its 32 x 32 quarter (wave_origin) as 2 x 2 tiles of 16 x 16, for kk = 0 and 16
//   4. store_c writes the accumulators (fragment layout M::c) times the row's inverse scale, bounds-checked.
// Row pitches are kBK + 8 halves: 80 bytes, so consecutive rows start in different LDS banks.
#pragma once
#include <cmath>
#include <cstdint>

#include "hip/dequant.h"
#include "hip/mma_layout.h"

namespace greta::hip::gemm {

inline constexpr int kBM = 64, kBN = 64, kBK = 32;
inline constexpr int kLdA = kBK + 8, kLdB = kBK + 8;
inline constexpr int kWaves = 4;

// Element stores into LDS: fp16 on the device, plain floats in the CPU tests.
GRETA_HD GRETA_INLINE void put(float& dst, float v) { dst = v; }
GRETA_HD GRETA_INLINE float get(const float& v) { return v; }
#if defined(GRETA_GPU)
__device__ GRETA_INLINE void put(half_t& dst, float v) { dst = to_half(v); }
__device__ GRETA_INLINE float get(const half_t& v) { return from_half(v); }
#endif

// The 32 x 32 quarter of the block tile that wave w (0..3) computes.
GRETA_HD GRETA_INLINE RowCol wave_origin(int wave) { return {32 * (wave / 2), 32 * (wave % 2)}; }

// Power-of-two factor s with amax * s in [2^13, 2^14) (1 for a zero or non-finite amax). The GEMM multiplies the
// row by s before rounding to fp16 and its results by 1/s: both exact.
GRETA_HD GRETA_INLINE float row_scale_for(float amax) {
  if (!(amax > 0.f) || !(amax < 3.0e38f)) return 1.f;
  int e = 0;
  frexpf(amax, &e);  // amax = f * 2^e, f in [0.5, 1)
  e = e < -100 ? -100 : (e > 100 ? 100 : e);
  return ldexpf(1.f, 14 - e);
}

// Step 1. A is [M][lda] fp16 (or float in tests); thread tid of nthreads copies chunks of 8 consecutive K values.
template <class T>
GRETA_HD GRETA_INLINE void stage_a(int tid, int nthreads, const T* a, int64_t lda, int64_t M, int64_t K, int64_t m0,
                                   int64_t k0, T* lds_a) {
  constexpr int kChunks = kBM * kBK / 8;
  for (int c = tid; c < kChunks; c += nthreads) {
    const int r = c / (kBK / 8), kc = (c % (kBK / 8)) * 8;
    const int64_t m = m0 + r;
    for (int j = 0; j < 8; ++j) {
      const int64_t k = k0 + kc + j;
      if (m < M && k < K)
        lds_a[r * kLdA + kc + j] = a[m * lda + k];
      else
        put(lds_a[r * kLdA + kc + j], 0.f);
    }
  }
}

// Step 2. W rows are w_row_bytes apart; each task decodes one group of 16 weights of one row.
template <WType W, class T>
GRETA_HD GRETA_INLINE void stage_b(int tid, int nthreads, const uint8_t* w, uint64_t w_row_bytes, int64_t N,
                                   int64_t K, int64_t n0, int64_t k0, T* lds_b) {
  constexpr int kGroupsPerRow = kBK / 16, kTasks = kBN * kGroupsPerRow;
  for (int g = tid; g < kTasks; g += nthreads) {
    const int n = g / kGroupsPerRow, kg = (g % kGroupsPerRow) * 16;
    float v[16];
    if (n0 + n < N && k0 + kg < K)
      dequant_group16<W>(w + uint64_t(n0 + n) * w_row_bytes, k0 + kg, K, v);
    else
      for (int j = 0; j < 16; ++j) v[j] = 0.f;
    for (int j = 0; j < 16; ++j) put(lds_b[n * kLdB + kg + j], v[j]);
  }
}

// Step 3. Calls fn(mi, ni, a_frag, b_frag) for the 2 x 2 tiles of wave `wave` and both 16-wide K steps, in the
// order the accumulators are updated. On the device fn issues the matrix instruction; the CPU tests collect the
// fragments of all lanes and apply the instruction's model.
template <class M, class T, class Fn>
GRETA_HD GRETA_INLINE void for_each_mma(int lane, int wave, const T* lds_a, const T* lds_b, Fn&& fn) {
  const RowCol o = wave_origin(wave);
  for (int kk = 0; kk < kBK; kk += 16) {
    T af[2][M::kA], bf[2][M::kB];
    for (int mi = 0; mi < 2; ++mi) load_a_mk<M>(lane, lds_a, kLdA, o.row + 16 * mi, kk, af[mi]);
    for (int ni = 0; ni < 2; ++ni) load_b_nk<M>(lane, lds_b, kLdB, o.col + 16 * ni, kk, bf[ni]);
    for (int mi = 0; mi < 2; ++mi)
      for (int ni = 0; ni < 2; ++ni) fn(mi, ni, af[mi], bf[ni]);
  }
}

// Step 4. acc[mi][ni][i] is item i of the lane's C fragment of tile (mi, ni). out is [M][ldo]; row_inv_scale (or
// null) holds 1/s per row of A.
template <class M>
GRETA_HD GRETA_INLINE void store_c(int lane, int wave, const float (*acc)[2][M::kC], float* out, int64_t ldo,
                                   int64_t Mrows, int64_t N, int64_t m0, int64_t n0, const float* row_inv_scale) {
  const RowCol o = wave_origin(wave);
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 2; ++ni)
      for (int i = 0; i < M::kC; ++i) {
        const RowCol rc = M::c(lane, i);
        const int64_t m = m0 + o.row + 16 * mi + rc.row, n = n0 + o.col + 16 * ni + rc.col;
        if (m < Mrows && n < N) out[m * ldo + n] = acc[mi][ni][i] * (row_inv_scale ? row_inv_scale[m] : 1.f);
      }
}

}  // namespace greta::hip::gemm
