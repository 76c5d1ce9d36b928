// The thin GPU-API layer of the HIP backend: the one header through which every kernel and host file of src/hip
// reaches the GPU toolchain, so the same sources compile
//   - with clang (-x hip) for AMD GPUs: HIP runtime, MFMA on CDNA (gfx90a, gfx942; wave64), WMMA on RDNA3
//     (gfx1100, gfx1103; wave32);
//   - with nvcc for NVIDIA GPUs: CUDA runtime, mma.sync tensor-core instructions (warp32). Debian's HIP headers for
//     the NVIDIA platform do not compile with CUDA 13, hence this layer instead of hipify.
//   - with a plain host compiler (g++ for the CPU tests): only GRETA_HD and the scalar helpers are usable then.
//
// Names: gpu* mirror the runtime API (gpuMalloc = hipMalloc / cudaMalloc); device helpers are lower_case.
// The wave size is a compile-time constant of each device pass (kWave), never assumed by host code: the host asks
// the device (DeviceProps::wave_size) and launches blocks of waves.
#pragma once
#include <cstdint>
#include <cstring>

// ---- which compiler pass is this ----------------------------------------------------------------------------------
#if defined(__HIP__)
#define GRETA_GPU_HIP 1
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#define GRETA_GPU_CUDA 1
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#if defined(GRETA_GPU_HIP) || defined(GRETA_GPU_CUDA)
#define GRETA_GPU 1
#define GRETA_HD __host__ __device__
#define GRETA_DEVICE __device__
#define GRETA_INLINE __forceinline__
#else
#define GRETA_HD
#define GRETA_DEVICE
#define GRETA_INLINE inline
#endif

// GRETA_DEVICE_PASS: this pass generates device code (the kernels' bodies are compiled only here).
#if (defined(GRETA_GPU_HIP) && defined(__HIP_DEVICE_COMPILE__)) || (defined(GRETA_GPU_CUDA) && defined(__CUDA_ARCH__))
#define GRETA_DEVICE_PASS 1
#endif

// ---- matrix-core family of the device pass ------------------------------------------------------------------------
// GRETA_MMA_MFMA: CDNA2/CDNA3 v_mfma_f32_16x16x16f16, wave64.
// GRETA_MMA_WMMA: RDNA3 v_wmma_f32_16x16x16_f16 (wave32 variant).
// GRETA_MMA_NV:   NVIDIA mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (sm_80+), warp32.
#if defined(GRETA_DEVICE_PASS)
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define GRETA_MMA_MFMA 1
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__)
#define GRETA_MMA_WMMA 1
#elif defined(GRETA_GPU_CUDA) && __CUDA_ARCH__ >= 800
#define GRETA_MMA_NV 1
#endif
#endif

namespace greta::hip {

// ---- wave size of the device pass ---------------------------------------------------------------------------------
#if defined(GRETA_GPU_HIP) && defined(GRETA_DEVICE_PASS)
inline constexpr int kWave = __AMDGCN_WAVEFRONT_SIZE;
#elif defined(GRETA_GPU_CUDA) && defined(GRETA_DEVICE_PASS)
inline constexpr int kWave = 32;
#else
inline constexpr int kWave = 64;  // host pass: never used for indexing, only to let templates instantiate
#endif

// Threads per block of the kernels that are written per wave: kWavesPerBlock waves of the device's wave size.
inline constexpr int kWavesPerBlock = 4;

// ---- fp16 storage type ------------------------------------------------------------------------------------------
#if defined(GRETA_GPU_HIP)
using half_t = _Float16;
#elif defined(GRETA_GPU_CUDA)
using half_t = __half;
#else
using half_t = uint16_t;  // host: raw bits (tests use floats for fragment models)
#endif

// fp16 bits -> float, exact (subnormals, inf, nan). Device passes use the hardware conversion.
GRETA_HD GRETA_INLINE float half_bits_to_float(uint16_t h) {
#if defined(GRETA_GPU_HIP) && defined(GRETA_DEVICE_PASS)
  return float(__builtin_bit_cast(_Float16, h));
#elif defined(GRETA_GPU_CUDA) && defined(GRETA_DEVICE_PASS)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exp = 113;
    while (!(mant & 0x400u)) mant <<= 1, --exp;
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

// bf16 bits -> float (exact: bf16 is the top half of an fp32).
GRETA_HD GRETA_INLINE float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
#if defined(GRETA_DEVICE_PASS)
#if defined(GRETA_GPU_HIP)
  return __builtin_bit_cast(float, bits);
#else
  return __uint_as_float(bits);
#endif
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

#if defined(GRETA_GPU)
// float -> fp16 storage, round to nearest even.
__device__ GRETA_INLINE half_t to_half(float f) {
#if defined(GRETA_GPU_HIP)
  return _Float16(f);
#else
  return __float2half_rn(f);
#endif
}
__device__ GRETA_INLINE float from_half(half_t h) {
#if defined(GRETA_GPU_HIP)
  return float(h);
#else
  return __half2float(h);
#endif
}
#endif

// ---- device intrinsics --------------------------------------------------------------------------------------------
#if defined(GRETA_GPU)
__device__ GRETA_INLINE int thread_id() { return int(threadIdx.x); }
__device__ GRETA_INLINE int lane_id() { return int(threadIdx.x) % kWave; }
__device__ GRETA_INLINE int wave_id() { return int(threadIdx.x) / kWave; }
__device__ GRETA_INLINE void block_barrier() { __syncthreads(); }

// Butterfly exchange within a wave (every lane gets the value of lane ^ mask).
__device__ GRETA_INLINE float wave_xor(float v, int mask) {
#if defined(GRETA_GPU_HIP)
  return __shfl_xor(v, mask, kWave);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, kWave);
#endif
}
__device__ GRETA_INLINE float wave_sum(float v) {
  for (int m = kWave / 2; m > 0; m >>= 1) v += wave_xor(v, m);
  return v;
}
__device__ GRETA_INLINE float wave_max(float v) {
  for (int m = kWave / 2; m > 0; m >>= 1) v = fmaxf(v, wave_xor(v, m));
  return v;
}
#endif

}  // namespace greta::hip

// ---- runtime API --------------------------------------------------------------------------------------------------
#if defined(GRETA_GPU_HIP)
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuGraph_t = hipGraph_t;
using gpuGraphExec_t = hipGraphExec_t;
using gpuDeviceProp = hipDeviceProp_t;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuSetDevice hipSetDevice
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostMalloc(p, n) hipHostMalloc(p, n, 0)
#define gpuHostFree hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateNonBlocking(s) hipStreamCreateWithFlags(s, hipStreamNonBlocking)
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent(s, e) hipStreamWaitEvent(s, e, 0)
#define gpuEventCreate hipEventCreate
#define gpuEventCreateNoTiming(e) hipEventCreateWithFlags(e, hipEventDisableTiming)
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuStreamBeginCapture(s) hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(e, g) hipGraphInstantiate(e, g, nullptr, nullptr, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuDeviceSynchronize hipDeviceSynchronize
#elif defined(GRETA_GPU_CUDA)
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuGraph_t = cudaGraph_t;
using gpuGraphExec_t = cudaGraphExec_t;
using gpuDeviceProp = cudaDeviceProp;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuSetDevice cudaSetDevice
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostMalloc(p, n) cudaMallocHost(p, n)
#define gpuHostFree cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateNonBlocking(s) cudaStreamCreateWithFlags(s, cudaStreamNonBlocking)
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent(s, e) cudaStreamWaitEvent(s, e, 0)
#define gpuEventCreate cudaEventCreate
#define gpuEventCreateNoTiming(e) cudaEventCreateWithFlags(e, cudaEventDisableTiming)
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuStreamBeginCapture(s) cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(e, g) cudaGraphInstantiate(e, g, 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuDeviceSynchronize cudaDeviceSynchronize
#endif
