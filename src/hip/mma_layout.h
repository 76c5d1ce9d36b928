// Fragment layouts of the matrix instructions the HIP backend uses: which lane holds which element of A, B and C/D
// in a wave-wide 16x16x16 multiply-accumulate D = A * B + C (A: 16x16 [m][k], B: 16x16 [k][n], C/D: 16x16 [m][n]).
// Host and device code share these functions: the kernels index LDS with them, and tests/hip runs the same index
// math on the CPU against an independent model of each instruction (tests/hip/mma_models.h) to show that the
// kernels compute the right tiles. A transposed operand here is exactly the bug that would make prefill (GEMM) and
// decode (matvec) disagree, so it is tested without the hardware.
//
// Each traits struct gives, for lane l and fragment element i, the (row, col) of the matrix element it holds:
//   a(l, i) -> (m, k)    b(l, i) -> (k, n)    c(l, i) -> (m, n)
//
// MmaMfma16 — CDNA2/CDNA3 (gfx90a, gfx942) v_mfma_f32_16x16x16f16, wave64, 4 A + 4 B halves and 4 f32 per lane.
//   AMD's layout (AMD Matrix Instruction Calculator, `--detail-instruction` for v_mfma_f32_16x16x16f16 on CDNA3;
//   the same tables appear in AMD's CDNA3 ISA guide, section "Dependent arithmetic: matrix fused multiply-add"):
//     A[i][k]: lane = i + 16 * (k / 4), item k % 4
//     B[k][j]: lane = j + 16 * (k / 4), item k % 4
//     D[i][j]: lane = j + 16 * (i / 4), item i % 4
//   i.e. lanes 0-15 hold K 0-3, lanes 16-31 K 4-7 ...; each lane holds 4 consecutive rows of one column of D.
//
// MmaWmma16 — RDNA3 (gfx1100, gfx1103) v_wmma_f32_16x16x16_f16 in wave32, 16 A + 16 B halves and 8 f32 per lane.
//   RDNA3 ISA guide ("Wave Matrix Multiply Accumulate"), AMD GPUOpen "How to accelerate AI applications on RDNA 3
//   using WMMA": lane l (and l + 16, which must hold a copy: the inputs are replicated across the two half-waves)
//   holds row l % 16 of A (all 16 K values, item = k) and column l % 16 of B (item = k); with the f32 accumulator
//   (OPSEL unused) item v of lane l is D[2 * v + l / 16][l % 16].
//
// MmaNv16 — NVIDIA (sm_80+, used by the nvcc build) as two mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, one
//   per 8-column half of the 16x16 tile, warp32. PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
//   type": groupID g = lane >> 2, threadID_in_group t = lane % 4;
//     A a0..a7: row = g (+8 for a2,a3,a6,a7), col = 2t + (i & 1) (+8 for a4..a7)
//     B b0..b3: row(k) = 2t + (i & 1) (+8 for b2,b3), col = g
//     C c0..c3: row = g (+8 for c2,c3), col = 2t + (i & 1)
//   Our fragment: A items 0..7 = a0..a7; B items 0..3 = b0..b3 of the n=0..7 half, 4..7 of the n=8..15 half;
//   C items 0..3 = c0..c3 of the first half, 4..7 of the second.
#pragma once
#include "hip/gpu_api.h"

namespace greta::hip {

struct RowCol {
  int row, col;
};

struct MmaMfma16 {
  static constexpr int kLanes = 64, kA = 4, kB = 4, kC = 4;
  static constexpr const char* kName = "v_mfma_f32_16x16x16f16";
  GRETA_HD static RowCol a(int lane, int i) { return {lane % 16, 4 * (lane / 16) + i}; }
  GRETA_HD static RowCol b(int lane, int i) { return {4 * (lane / 16) + i, lane % 16}; }
  GRETA_HD static RowCol c(int lane, int i) { return {4 * (lane / 16) + i, lane % 16}; }
};

struct MmaWmma16 {
  static constexpr int kLanes = 32, kA = 16, kB = 16, kC = 8;
  static constexpr const char* kName = "v_wmma_f32_16x16x16_f16 (wave32)";
  GRETA_HD static RowCol a(int lane, int i) { return {lane % 16, i}; }
  GRETA_HD static RowCol b(int lane, int i) { return {i, lane % 16}; }
  GRETA_HD static RowCol c(int lane, int i) { return {2 * i + lane / 16, lane % 16}; }
};

struct MmaNv16 {
  static constexpr int kLanes = 32, kA = 8, kB = 8, kC = 8;
  static constexpr const char* kName = "2x mma.sync.m16n8k16.f32.f16.f16.f32";
  GRETA_HD static RowCol a(int lane, int i) {
    const int g = lane >> 2, t = lane & 3;
    return {g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)};
  }
  GRETA_HD static RowCol b(int lane, int i) {
    const int g = lane >> 2, t = lane & 3;
    return {2 * t + (i & 1) + 8 * ((i >> 1) & 1), g + 8 * (i >> 2)};
  }
  GRETA_HD static RowCol c(int lane, int i) {
    const int g = lane >> 2, t = lane & 3;
    return {g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)};
  }
};

// ---- fragment loads from LDS tiles --------------------------------------------------------------------------------
// Three tile layouts occur (ld = elements between rows of the tile as stored):
//   A "mk": A[m][k] at tile[m * ld + k]      activations, queries, attention probabilities
//   B "nk": B[k][n] at tile[n * ld + k]      weight rows (out feature n, in feature k contiguous), K-cache rows
//   B "kn": B[k][n] at tile[k * ld + n]      V-cache rows (key k, dimension n contiguous)
// `m0`/`n0`/`k0` select the 16x16 sub-tile. T is the stored element (fp16 on device, float in the CPU tests).
template <class M, class T>
GRETA_HD GRETA_INLINE void load_a_mk(int lane, const T* tile, int ld, int m0, int k0, T* frag) {
  for (int i = 0; i < M::kA; ++i) {
    const RowCol rc = M::a(lane, i);
    frag[i] = tile[(m0 + rc.row) * ld + k0 + rc.col];
  }
}
template <class M, class T>
GRETA_HD GRETA_INLINE void load_b_nk(int lane, const T* tile, int ld, int n0, int k0, T* frag) {
  for (int i = 0; i < M::kB; ++i) {
    const RowCol rc = M::b(lane, i);
    frag[i] = tile[(n0 + rc.col) * ld + k0 + rc.row];
  }
}
template <class M, class T>
GRETA_HD GRETA_INLINE void load_b_kn(int lane, const T* tile, int ld, int k0, int n0, T* frag) {
  for (int i = 0; i < M::kB; ++i) {
    const RowCol rc = M::b(lane, i);
    frag[i] = tile[(k0 + rc.row) * ld + n0 + rc.col];
  }
}

// ---- the instructions (device passes only) ------------------------------------------------------------------------
#if defined(GRETA_DEVICE_PASS) && defined(GRETA_MMA_MFMA)
using Mma = MmaMfma16;
__device__ GRETA_INLINE void mma_16x16x16(const half_t* a, const half_t* b, float* c) {
  typedef _Float16 half4 __attribute__((ext_vector_type(4)));
  typedef float float4v __attribute__((ext_vector_type(4)));
  const half4 av = {a[0], a[1], a[2], a[3]}, bv = {b[0], b[1], b[2], b[3]};
  float4v cv = {c[0], c[1], c[2], c[3]};
  cv = __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, cv, 0, 0, 0);
  for (int i = 0; i < 4; ++i) c[i] = cv[i];
}
#elif defined(GRETA_DEVICE_PASS) && defined(GRETA_MMA_WMMA)
using Mma = MmaWmma16;
__device__ GRETA_INLINE void mma_16x16x16(const half_t* a, const half_t* b, float* c) {
  typedef _Float16 half16 __attribute__((ext_vector_type(16)));
  typedef float float8v __attribute__((ext_vector_type(8)));
  half16 av, bv;
  for (int i = 0; i < 16; ++i) av[i] = a[i], bv[i] = b[i];
  float8v cv;
  for (int i = 0; i < 8; ++i) cv[i] = c[i];
  cv = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(av, bv, cv);
  for (int i = 0; i < 8; ++i) c[i] = cv[i];
}
#elif defined(GRETA_DEVICE_PASS) && defined(GRETA_MMA_NV)
using Mma = MmaNv16;
__device__ GRETA_INLINE uint32_t pack_half2(half_t lo, half_t hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}
__device__ GRETA_INLINE void mma_16x16x16(const half_t* a, const half_t* b, float* c) {
  const uint32_t a0 = pack_half2(a[0], a[1]), a1 = pack_half2(a[2], a[3]), a2 = pack_half2(a[4], a[5]),
                 a3 = pack_half2(a[6], a[7]);
  for (int h = 0; h < 2; ++h) {  // n = 0..7, then n = 8..15
    const uint32_t b0 = pack_half2(b[4 * h], b[4 * h + 1]), b1 = pack_half2(b[4 * h + 2], b[4 * h + 3]);
    float* d = c + 4 * h;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
#else
// Host passes and devices without matrix cores: the kernels that need Mma are not instantiated there (the
// launchers refuse such devices). This alias only lets templates parse.
using Mma = MmaMfma16;
#endif

#if defined(GRETA_DEVICE_PASS) && (defined(GRETA_MMA_MFMA) || defined(GRETA_MMA_WMMA) || defined(GRETA_MMA_NV))
#define GRETA_HAVE_MMA 1
#endif

}  // namespace greta::hip
