// Helpers for the kernel launchers (GPU-compiled files only): error checks that throw greta::Error, grid sizes.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "hip/gpu_api.h"
#include "hip/kernels.h"

namespace greta::hip {

#define GRETA_GPU_CHECK(expr, what)                                                        \
  do {                                                                                     \
    const gpuError_t greta_gpu_err_ = (expr);                                              \
    if (greta_gpu_err_ != gpuSuccess) ::greta::fail("hip: ", what, ": ", gpuGetErrorString(greta_gpu_err_)); \
  } while (0)

inline void check_launch(const char* kernel) {
  const gpuError_t e = gpuGetLastError();
  if (e != gpuSuccess) fail("hip: launching ", kernel, ": ", gpuGetErrorString(e));
}

inline gpuStream_t stream_of(const LaunchCtx& c) { return static_cast<gpuStream_t>(c.stream); }

// Blocks of `per` threads (or items) covering n, at least 1; the grid's x dimension allows 2^31 - 1 blocks.
inline unsigned blocks_for(int64_t n, int64_t per) {
  const int64_t b = (n + per - 1) / per;
  GRETA_CHECK(b < (int64_t(1) << 31), "grid of ", b, " blocks");
  return unsigned(b < 1 ? 1 : b);
}

}  // namespace greta::hip
