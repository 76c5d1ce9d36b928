// Mixture-of-experts kernels of the HIP backend (engine::MoeRouteOp, MoeMatMulOp, MoeCombineOp); the CPU reference is
// src/cpu/op_moe.cpp.
//
//   moe_route_kernel    one block per token: the logits in LDS; each thread ranks its experts (rank of e = the number
//                       of experts before it in the order "larger logit first, the lower id on ties", so the slots
//                       come out exactly in the CPU's partial_sort order), the ones of rank < k take slot `rank`;
//                       the softmax (over all experts, or over the chosen k) and the normalization in fp64 in the
//                       CPU's order (the sums over all experts in a tree: ~1e-16 relative, far below fp32).
//   moe_matvec_kernel   decode: grid (output rows / kWavesPerBlock, slots), one wave per (slot, output row) as the
//                       dense matvec (k_matvec.hip), reading row e * out_features + r of the 3-D expert tensor for
//                       e = experts[slot]: only the chosen experts' rows are read.
//   moe_group_kernel    prefill: one block groups the step's slots by expert (moe_group.h: counts, offsets, tile
//                       table, scatter through LDS atomics) on the device, so the grouped GEMM needs no host sync and
//                       is captured in graphs like every other launch.
//   moe_gemm_kernel     prefill: the dense GEMM's 64 x 64 tiles (gemm_tile.h: 4 waves, K steps of 32, weights decoded
//                       to fp16 while staged; MFMA / WMMA / mma.sync) over grid (output-column tiles, work tiles): a
//                       work tile is up to 64 slots of one expert; its A rows are gathered from the fp16 input rows
//                       of those slots (rows_to_half: one power-of-two scale per row, as the dense GEMM), its B is
//                       that expert's weight rows, and results are scattered to the slots' output rows (+ bias).
//   moe_combine_kernel  out[t, i] = sum over s in order of weights[t, s] * in[t, s, i] (fp32, the CPU's order).
#include <cmath>

#include "hip/gemm_tile.h"
#include "hip/launch_util.h"
#include "hip/moe_group.h"

namespace greta::hip {
namespace {

constexpr int kThreads = 256;
constexpr int kRouteThreads = 64;  // a power of two (tree reductions)
constexpr int kGroupThreads = 256;

// ---- routing --------------------------------------------------------------------------------------------------------

// Tree reduction over the block (kRouteThreads) in LDS: every thread gets op(all values).
template <class Op>
__device__ double block_reduce(double v, double* red, Op op) {
  const int tid = thread_id();
  red[tid] = v;
  block_barrier();
  for (int stride = kRouteThreads / 2; stride > 0; stride /= 2) {
    if (tid < stride) red[tid] = op(red[tid], red[tid + stride]);
    block_barrier();
  }
  const double r = red[0];
  block_barrier();  // red is reused
  return r;
}

// LDS: red[kRouteThreads] (double) | chosen[k] (int) | logits[n_experts] (float)
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const float* logits, int32_t* experts, float* weights,
                                                                  int64_t n_experts, int64_t k, bool topk_softmax,
                                                                  bool normalize) {
  extern __shared__ double smem_d[];
  double* red = smem_d;
  int* chosen = reinterpret_cast<int*>(red + kRouteThreads);
  float* l = reinterpret_cast<float*>(chosen + k);
  const int64_t t = blockIdx.x;
  const int tid = thread_id();
  for (int64_t e = tid; e < n_experts; e += kRouteThreads) l[e] = logits[t * n_experts + e];
  for (int64_t s = tid; s < k; s += kRouteThreads) chosen[s] = -1;  // stays -1 only for NaN logits
  block_barrier();
  for (int64_t e = tid; e < n_experts; e += kRouteThreads) {
    const float v = l[e];
    int64_t rank = 0;
    for (int64_t i = 0; i < n_experts; ++i) rank += (l[i] > v || (l[i] == v && i < e)) ? 1 : 0;
    if (rank < k) chosen[rank] = int(e);
  }
  block_barrier();  // chosen[] complete
  // SoftmaxTopK: the maximum and the sum of e^(l - max) over all experts.
  double mx = -INFINITY, sum = 0.0;
  if (!topk_softmax) {
    double m = -INFINITY;
    for (int64_t e = tid; e < n_experts; e += kRouteThreads) m = fmax(m, double(l[e]));
    mx = block_reduce(m, red, [](double a, double b) { return fmax(a, b); });
    double s = 0.0;
    for (int64_t e = tid; e < n_experts; e += kRouteThreads) s += exp(double(l[e]) - mx);
    sum = block_reduce(s, red, [](double a, double b) { return a + b; });
  }
  if (tid != 0) return;
  int32_t* ex = experts + t * k;
  float* w = weights + t * k;
  if (topk_softmax) {  // the softmax over the chosen logits, in slot order (slot 0 holds the largest)
    mx = chosen[0] >= 0 ? double(l[chosen[0]]) : 0.0;
    for (int64_t s = 0; s < k; ++s) sum += chosen[s] >= 0 ? exp(double(l[chosen[s]]) - mx) : 0.0;
  }
  double chosen_sum = 0.0;
  for (int64_t s = 0; s < k; ++s) {
    const int e = chosen[s];
    ex[s] = e;
    w[s] = e >= 0 ? float(exp(double(l[e]) - mx) / sum) : 0.f;
    chosen_sum += double(w[s]);
  }
  if (normalize) {
    const double denom = chosen_sum > 6.103515625e-5 ? chosen_sum : 6.103515625e-5;
    for (int64_t s = 0; s < k; ++s) w[s] = float(double(w[s]) / denom);
  }
}

// ---- expert matvec (decode) ---------------------------------------------------------------------------------------

struct alignas(16) Float4 {
  float v[4];
};

template <WType W>
__global__ void __launch_bounds__(256) moe_matvec_kernel(MoeArgs a) {
  const int lane = lane_id();
  const int64_t r = int64_t(blockIdx.x) * kWavesPerBlock + wave_id(), slot = blockIdx.y;
  const int64_t N = a.out_features, cols = a.w.cols;
  if (r >= N) return;  // whole waves
  const int32_t e = a.experts[slot];
  float* out = a.out + slot * N + r;
  if (e < 0 || e >= a.n_experts) {
    if (lane == 0) *out = 0.f;
    return;
  }
  const uint8_t* row = a.w.data + (uint64_t(e) * uint64_t(N) + uint64_t(r)) * a.w.row_bytes;
  const float* x = a.in + (a.per_slot_input ? slot : slot / a.k) * cols;
  const bool vec4 = (cols & 3) == 0 && (reinterpret_cast<uintptr_t>(a.in) & 15) == 0;
  const int64_t groups = (cols + 15) / 16;
  float acc = 0.f;
  for (int64_t g = lane; g < groups; g += kWave) {
    float v[16];
    dequant_group16<W>(row, g * 16, cols, v);
    const int64_t k0 = g * 16;
    const int n_valid = cols - k0 < 16 ? int(cols - k0) : 16;
    float s = 0.f;
    if (vec4 && n_valid == 16) {
      for (int q = 0; q < 4; ++q) {
        const Float4 f = reinterpret_cast<const Float4*>(x + k0)[q];
        for (int i = 0; i < 4; ++i) s += v[4 * q + i] * f.v[i];
      }
    } else {
      for (int j = 0; j < n_valid; ++j) s += v[j] * x[k0 + j];
    }
    acc += s;
  }
  const float total = wave_sum(acc);
  if (lane == 0) *out = total + (a.bias ? a.bias[int64_t(e) * N + r] : 0.f);
}

// ---- grouped expert GEMM (prefill) --------------------------------------------------------------------------------

// Input rows -> fp16 with one power-of-two scale per row (as k_gemm.hip's rows_to_half_kernel; gemm::row_scale_for).
__global__ void __launch_bounds__(kThreads) moe_rows_to_half_kernel(const float* in, int64_t K, half_t* out,
                                                                    float* inv_scale) {
  __shared__ float scratch[kThreads / 32];
  const float* x = in + int64_t(blockIdx.x) * K;
  half_t* y = out + int64_t(blockIdx.x) * K;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < K; i += kThreads) amax = fmaxf(amax, fabsf(x[i]));
  amax = wave_max(amax);
  if (lane_id() == 0) scratch[wave_id()] = amax;
  __syncthreads();
  for (int w = 0; w < kThreads / kWave; ++w) amax = fmaxf(amax, scratch[w]);
  const float s = gemm::row_scale_for(amax);
  for (int64_t i = threadIdx.x; i < K; i += kThreads) y[i] = to_half(x[i] * s);
  if (threadIdx.x == 0) inv_scale[blockIdx.x] = 1.f / s;
}

// One block (moe_group.h steps 1-3). LDS: counts[n_experts] | cursor[n_experts] (int). Slots whose expert id is
// outside [0, n_experts) get zero output rows here (they are in no tile).
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const int32_t* experts, int64_t slots,
                                                                  int64_t n_experts, int32_t* sorted, moe::Tile* tiles,
                                                                  int32_t* n_tiles, float* out, int64_t N) {
  extern __shared__ int32_t smem_i[];
  int32_t* counts = smem_i;
  int32_t* cursor = counts + n_experts;
  const int tid = thread_id();
  for (int64_t e = tid; e < n_experts; e += kGroupThreads) counts[e] = 0;
  block_barrier();
  for (int64_t i = tid; i < slots; i += kGroupThreads) {
    const int32_t e = experts[i];
    if (e >= 0 && e < n_experts) {
      atomicAdd(&counts[e], 1);
    } else {
      for (int64_t n = 0; n < N; ++n) out[i * N + n] = 0.f;
    }
  }
  block_barrier();
  if (tid == 0) *n_tiles = moe::build_tiles(counts, n_experts, gemm::kBM, cursor, tiles);
  block_barrier();
  for (int64_t i = tid; i < slots; i += kGroupThreads) {
    const int32_t e = experts[i];
    if (e >= 0 && e < n_experts) sorted[atomicAdd(&cursor[e], 1)] = int32_t(i);
  }
}

struct MoeGemmArgs {
  const half_t* a;          // [in_rows, K] fp16
  const float* inv_scale;   // [in_rows]
  const int32_t* sorted;    // [slots]
  const moe::Tile* tiles;
  const int32_t* n_tiles;
  const uint8_t* w;         // the expert tensor: expert e's row n at w + (e * N + n) * row_bytes
  uint64_t row_bytes;
  const float* bias;        // [n_experts, N] or null
  float* out;               // [slots, N]
  int64_t N, K, k;
  bool per_slot_input;
};

template <WType W>
__global__ void __launch_bounds__(256) moe_gemm_kernel(MoeGemmArgs p) {
#if defined(GRETA_HAVE_MMA)
  static_assert(Mma::kLanes == kWave, "matrix instruction and wave size disagree");
  __shared__ half_t lds_a[gemm::kBM * gemm::kLdA];
  __shared__ half_t lds_b[gemm::kBN * gemm::kLdB];
  __shared__ int32_t src_row[gemm::kBM];  // input row of each tile row (-1: past the tile's slots)
  __shared__ int32_t dst_row[gemm::kBM];  // its slot (the output row)
  const int64_t tile_index = blockIdx.y;
  if (tile_index >= *p.n_tiles) return;  // the whole block: the grid is sized for the most tiles possible
  const moe::Tile tile = p.tiles[tile_index];
  const int tid = thread_id(), nthreads = gemm::kWaves * kWave, lane = lane_id(), wave = wave_id();
  for (int r = tid; r < gemm::kBM; r += nthreads) {
    const int32_t slot = r < tile.end - tile.begin ? p.sorted[tile.begin + r] : -1;
    dst_row[r] = slot;
    src_row[r] = slot < 0 ? -1 : (p.per_slot_input ? slot : int32_t(slot / p.k));
  }
  block_barrier();
  const uint8_t* w = p.w + uint64_t(tile.expert) * uint64_t(p.N) * p.row_bytes;
  const int64_t n0 = int64_t(blockIdx.x) * gemm::kBN;
  float acc[2][2][Mma::kC];
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 2; ++ni)
      for (int i = 0; i < Mma::kC; ++i) acc[mi][ni][i] = 0.f;
  for (int64_t k0 = 0; k0 < p.K; k0 += gemm::kBK) {
    // A: gemm::stage_a with each tile row read from its slot's input row (chunks of 8 consecutive K values).
    constexpr int kChunks = gemm::kBM * gemm::kBK / 8;
    for (int c = tid; c < kChunks; c += nthreads) {
      const int r = c / (gemm::kBK / 8), kc = (c % (gemm::kBK / 8)) * 8;
      const int32_t src = src_row[r];
      for (int j = 0; j < 8; ++j) {
        const int64_t kk = k0 + kc + j;
        if (src >= 0 && kk < p.K)
          lds_a[r * gemm::kLdA + kc + j] = p.a[int64_t(src) * p.K + kk];
        else
          gemm::put(lds_a[r * gemm::kLdA + kc + j], 0.f);
      }
    }
    gemm::stage_b<W>(tid, nthreads, w, p.row_bytes, p.N, p.K, n0, k0, lds_b);
    block_barrier();
    gemm::for_each_mma<Mma>(lane, wave, lds_a, lds_b,
                            [&](int mi, int ni, const half_t* af, const half_t* bf) { mma_16x16x16(af, bf, acc[mi][ni]); });
    block_barrier();
  }
  // gemm::store_c with the rows scattered to their slots, times the input row's inverse scale, plus the bias.
  const RowCol o = gemm::wave_origin(wave);
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 2; ++ni)
      for (int i = 0; i < Mma::kC; ++i) {
        const RowCol rc = Mma::c(lane, i);
        const int m = o.row + 16 * mi + rc.row;
        const int64_t n = n0 + o.col + 16 * ni + rc.col;
        const int32_t slot = dst_row[m];
        if (slot >= 0 && n < p.N)
          p.out[int64_t(slot) * p.N + n] = acc[mi][ni][i] * p.inv_scale[src_row[m]] +
                                           (p.bias ? p.bias[int64_t(tile.expert) * p.N + n] : 0.f);
      }
#endif
}

// ---- combine ------------------------------------------------------------------------------------------------------

// Grid (width blocks, n_tokens).
__global__ void moe_combine_kernel(const float* in, const float* weights, float* out, int64_t k, int64_t width) {
  const int64_t t = blockIdx.y, i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= width) return;
  float acc = 0.f;
  for (int64_t s = 0; s < k; ++s) acc += weights[t * k + s] * in[(t * k + s) * width + i];
  out[t * width + i] = acc;
}

// The grouped GEMM's scratch: a_half | inv_scale | sorted | tiles | n_tiles, each 256-byte aligned.
struct MoeScratch {
  uint64_t a_half, inv_scale, sorted, tiles, n_tiles, total;
};
uint64_t align256(uint64_t n) { return (n + 255) / 256 * 256; }
MoeScratch moe_scratch_layout(const MoeArgs& a) {
  MoeScratch s{};
  s.a_half = 0;
  s.inv_scale = s.a_half + align256(uint64_t(a.in_rows()) * uint64_t(a.w.cols) * sizeof(half_t));
  s.sorted = s.inv_scale + align256(uint64_t(a.in_rows()) * sizeof(float));
  s.tiles = s.sorted + align256(uint64_t(a.slots()) * sizeof(int32_t));
  s.n_tiles = s.tiles + align256(uint64_t(moe_max_tiles(a.slots(), a.n_experts, gemm::kBM)) * sizeof(moe::Tile));
  s.total = s.n_tiles + 256;
  return s;
}

void check_moe(const MoeArgs& a) {
  GRETA_CHECK(a.n_experts > 0 && a.k > 0 && a.out_features > 0 && a.w.rows == a.n_experts * a.out_features,
              "moe: expert tensor of ", a.w.rows, " rows for ", a.n_experts, " experts of ", a.out_features);
  GRETA_CHECK(a.slots() < 65536, "moe: ", a.slots(), " slots in one step");
}

}  // namespace

int64_t moe_max_tiles(int64_t slots, int64_t n_experts, int64_t tile) { return moe::max_tiles(slots, n_experts, tile); }

void launch_moe_route(const LaunchCtx& c, const float* logits, int32_t* experts, float* weights, int64_t n_tokens,
                      int64_t n_experts, int64_t k, bool topk_then_softmax, bool normalize) {
  if (n_tokens <= 0) return;
  GRETA_CHECK(n_experts > 0 && n_experts <= kMoeMaxExperts && k >= 1 && k <= n_experts, "moe_route: ", k, " of ",
              n_experts, " experts");
  GRETA_CHECK(n_tokens < (int64_t(1) << 31), "moe_route of ", n_tokens, " tokens");
  const size_t smem = sizeof(double) * kRouteThreads + sizeof(int) * size_t(k) + sizeof(float) * size_t(n_experts);
  moe_route_kernel<<<unsigned(n_tokens), kRouteThreads, smem, stream_of(c)>>>(logits, experts, weights, n_experts, k,
                                                                               topk_then_softmax, normalize);
  check_launch("moe_route");
}

void launch_moe_matvec(const LaunchCtx& c, const MoeArgs& a) {
  check_moe(a);
  if (a.n_tokens <= 0) return;
  const dim3 grid(blocks_for(a.out_features, kWavesPerBlock), unsigned(a.slots()));
  const unsigned threads = unsigned(kWavesPerBlock * c.wave);
  switch (a.w.type) {
#define GRETA_MOE_MATVEC_CASE(T)                                                  \
  case WType::T:                                                                  \
    moe_matvec_kernel<WType::T><<<grid, threads, 0, stream_of(c)>>>(a);           \
    break;
    GRETA_HIP_FOR_EACH_WTYPE(GRETA_MOE_MATVEC_CASE)
#undef GRETA_MOE_MATVEC_CASE
  }
  check_launch("moe_matvec");
}

uint64_t moe_gemm_scratch_bytes(const MoeArgs& a) { return moe_scratch_layout(a).total; }

void launch_moe_gemm(const LaunchCtx& c, const MoeArgs& a, void* scratch) {
  GRETA_CHECK(c.mma, "moe gemm launched on a device without matrix cores");
  check_moe(a);
  GRETA_CHECK(a.n_experts <= kMoeMaxExperts, "moe: ", a.n_experts, " experts");
  if (a.n_tokens <= 0) return;
  const MoeScratch l = moe_scratch_layout(a);
  auto* base = static_cast<uint8_t*>(scratch);
  auto* a_half = reinterpret_cast<half_t*>(base + l.a_half);
  auto* inv_scale = reinterpret_cast<float*>(base + l.inv_scale);
  auto* sorted = reinterpret_cast<int32_t*>(base + l.sorted);
  auto* tiles = reinterpret_cast<moe::Tile*>(base + l.tiles);
  auto* n_tiles = reinterpret_cast<int32_t*>(base + l.n_tiles);
  moe_rows_to_half_kernel<<<blocks_for(a.in_rows(), 1), kThreads, 0, stream_of(c)>>>(a.in, a.w.cols, a_half,
                                                                                      inv_scale);
  check_launch("moe_rows_to_half");
  moe_group_kernel<<<1, kGroupThreads, sizeof(int32_t) * size_t(2 * a.n_experts), stream_of(c)>>>(
      a.experts, a.slots(), a.n_experts, sorted, tiles, n_tiles, a.out, a.out_features);
  check_launch("moe_group");
  const int64_t max_tiles = moe_max_tiles(a.slots(), a.n_experts, gemm::kBM);
  GRETA_CHECK(max_tiles < 65536, "moe gemm of ", max_tiles, " tiles");
  const MoeGemmArgs p{a_half,      inv_scale, sorted,       tiles, n_tiles, a.w.data, a.w.row_bytes, a.bias, a.out,
                      a.out_features, a.w.cols, a.k, a.per_slot_input};
  const dim3 grid(blocks_for(a.out_features, gemm::kBN), unsigned(max_tiles < 1 ? 1 : max_tiles));
  const unsigned threads = unsigned(gemm::kWaves * c.wave);
  switch (a.w.type) {
#define GRETA_MOE_GEMM_CASE(T)                                                    \
  case WType::T:                                                                  \
    moe_gemm_kernel<WType::T><<<grid, threads, 0, stream_of(c)>>>(p);             \
    break;
    GRETA_HIP_FOR_EACH_WTYPE(GRETA_MOE_GEMM_CASE)
#undef GRETA_MOE_GEMM_CASE
  }
  check_launch("moe_gemm");
}

void launch_moe_combine(const LaunchCtx& c, const float* in, const float* weights, float* out, int64_t n_tokens,
                        int64_t k, int64_t width) {
  if (n_tokens <= 0 || width <= 0) return;
  GRETA_CHECK(n_tokens < 65536, "moe_combine of ", n_tokens, " tokens");
  const dim3 grid(blocks_for(width, kThreads), unsigned(n_tokens));
  moe_combine_kernel<<<grid, kThreads, 0, stream_of(c)>>>(in, weights, out, k, width);
  check_launch("moe_combine");
}

}  // namespace greta::hip
