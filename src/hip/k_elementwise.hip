// Memory-bound kernels of the HIP backend: embedding lookup (any weight type, optional scale), RMSNorm, bias, the
// gated linear units (SiLU, tanh-GELU, gpt-oss's clamped SwiGLU), residual add, RoPE (with YaRN), KV-cache write (f32,
// f16 or q8_0 paged cache), row gather. Each mirrors src/cpu/op_*.cpp; precision notes where they differ:
//   - RMSNorm sums squares in fp32 (the CPU in fp64): a relative difference of ~1e-7 on the scale.
//   - The GLUs run in fp32 (the CPU in fp64): expf / tanhf differ by an ulp or two (NMSE ~1e-14).
//   - RoPE computes angles, cos and sin in fp64 like the CPU (positions times frequencies reach 1e5 rad, where
//     fp32 angles would be off by ~1e-2), in the CPU's operation order.
#include <cmath>

#include "hip/dequant.h"
#include "hip/launch_util.h"

namespace greta::hip {
namespace {

constexpr int kThreads = 256;  // a multiple of both wave sizes

// One thread per group of 16 output values; grid (groups, tokens).
template <WType W>
__global__ void __launch_bounds__(kThreads) embed_kernel(const uint8_t* table, uint64_t row_bytes, int64_t rows,
                                                         int64_t dim, const int32_t* tokens, float* out,
                                                         float scale) {
  const int64_t t = blockIdx.y, g = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t k0 = g * 16;
  if (k0 >= dim) return;
  const int32_t id = tokens[t];
  float v[16];
  if (id >= 0 && id < rows)
    dequant_group16<W>(table + uint64_t(id) * row_bytes, k0, dim, v);
  else
    for (int j = 0; j < 16; ++j) v[j] = 0.f;
  float* o = out + t * dim + k0;
  // scale == 1 stores the decoded values themselves; otherwise one fp32 multiply, as the CPU's embed then scale.
  for (int j = 0; j < 16 && k0 + j < dim; ++j) o[j] = scale == 1.f ? v[j] : v[j] * scale;
}

// Block-wide sum through LDS (kThreads threads).
__device__ float block_sum(float v, float* scratch) {
  v = wave_sum(v);
  if (lane_id() == 0) scratch[wave_id()] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kThreads / kWave; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const float* in, const float* weight, float* out,
                                                           int64_t width, float eps) {
  __shared__ float scratch[kThreads / 32];
  const float* x = in + int64_t(blockIdx.x) * width;
  float* y = out + int64_t(blockIdx.x) * width;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) sum += x[i] * x[i];
  sum = block_sum(sum, scratch);
  const float scale = 1.f / sqrtf(sum / float(width) + eps);
  for (int64_t i = threadIdx.x; i < width; i += kThreads) y[i] = (x[i] * scale) * weight[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t rows, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < rows * width) x[i] += bias[i % width];
}

// out = act(gate) * up (engine::GluKind's formulas; out may alias gate or up: each thread reads before it writes).
template <GluAct A>
__global__ void glu_kernel(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i], u = up[i];
  if constexpr (A == GluAct::SiLU) {
    out[i] = (g / (1.f + expf(-g))) * u;
  } else if constexpr (A == GluAct::GeluTanh) {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f;
    out[i] = 0.5f * g * (1.f + tanhf(kSqrt2OverPi * g * (1.f + 0.044715f * g * g))) * u;
  } else {
    const float x = fminf(g, limit), y = fminf(fmaxf(u, -limit), limit);
    out[i] = x / (1.f + expf(-alpha * x)) * (y + 1.f);
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] += y[i];
}

// One thread per rotated pair: i = (t * n_heads + h) * half + pair. As src/cpu/op_rope.cpp: e = p * inv_freq (the
// unscaled angle), theta = freq_scale * e blended with e by YaRN's ramp (mix = 0 without YaRN), cos and sin times
// mscale = attn_factor (* (1 + 0.1 ln(1 / freq_scale)) with YaRN).
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            int64_t rope_dims, bool adjacent, float base, float freq_scale,
                            const float* freq_factors, RopeScaling yarn) {
  const int64_t half = rope_dims / 2;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n_tokens * n_heads * half) return;
  const int64_t pair = i % half, th = i / half, t = th / n_heads;
  const double inv_freq = pow(double(base), -2.0 * double(pair) / double(rope_dims)) /
                          (freq_factors ? double(freq_factors[pair]) : 1.0);
  double mix = 0.0, mscale = double(yarn.attn_factor);
  if (yarn.ext_factor != 0.f) {
    const double y = (double(pair) - double(yarn.low)) / fmax(0.001, double(yarn.high) - double(yarn.low));
    mix = (1.0 - fmin(1.0, fmax(0.0, y))) * double(yarn.ext_factor);
    mscale *= 1.0 + 0.1 * log(1.0 / double(freq_scale));
  }
  const double extrap = double(positions[t]) * inv_freq, interp = double(freq_scale) * extrap;
  const double theta = interp * (1.0 - mix) + extrap * mix;
  double s, c;
  sincos(theta, &s, &c);
  s *= mscale;
  c *= mscale;
  float* h = x + th * head_dim;
  float* pa = adjacent ? h + 2 * pair : h + pair;
  float* pb = adjacent ? h + 2 * pair + 1 : h + pair + half;
  const double a = *pa, b = *pb;
  *pa = float(a * c - b * s);
  *pb = float(a * s + b * c);
}

// Grid (width blocks, n_tokens): one thread per element of token t's row, stored at cache row rows[t] (f32, f16).
template <class C>
__global__ void kv_write_kernel(const float* src, C* cache, const int32_t* rows, int64_t width, int64_t cache_rows) {
  const int64_t t = blockIdx.y, i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t r = rows[t];
  if (i >= width || r < 0 || r >= cache_rows) return;
  const float v = src[t * width + i];
  if constexpr (sizeof(C) == 2)
    cache[r * width + i] = to_half(v);  // round to nearest even, as the CPU's fp32_to_fp16
  else
    cache[r * width + i] = v;
}

// q8_0 (kv_cache.h: KvQ8's layout). Grid (blocks of kThreads q8 blocks, n_tokens): one thread per block b of 32
// elements of token t's row (width % 32 == 0), stored as block rows[t] * width / 32 + b of the cache, quantized by
// q8_quantize_block (bit-identical to the CPU's kv_q8_quantize; the layout tests check that function on the host).
__global__ void kv_write_q8_kernel(const float* src, uint32_t* cache, const int32_t* rows, int64_t width,
                                   int64_t cache_rows) {
  const int64_t t = blockIdx.y, b = int64_t(blockIdx.x) * kThreads + threadIdx.x, n_blocks = width / kQ8Block;
  const int64_t r = rows[t];
  if (b >= n_blocks || r < 0 || r >= cache_rows) return;
  q8_quantize_block(src + t * width + b * kQ8Block, cache + (r * n_blocks + b) * kQ8Words);
}

// Grid (width blocks, n_rows).
__global__ void gather_rows_kernel(const float* in, const int32_t* rows, float* out, int64_t width, int64_t in_rows) {
  const int64_t r = blockIdx.y, i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= width) return;
  const int64_t src = rows[r];
  out[r * width + i] = src >= 0 && src < in_rows ? in[src * width + i] : 0.f;
}

__global__ void probe_kernel() {}

}  // namespace

void launch_embed(const LaunchCtx& c, const DeviceWeight& table, const int32_t* tokens, int64_t n_tokens, float* out,
                  float scale) {
  if (n_tokens <= 0) return;
  GRETA_CHECK(n_tokens < 65536, "embed of ", n_tokens, " tokens");
  const dim3 grid(blocks_for((table.cols + 15) / 16, kThreads), unsigned(n_tokens));
  switch (table.type) {
#define GRETA_EMBED_CASE(T)                                                                                       \
  case WType::T:                                                                                                  \
    embed_kernel<WType::T><<<grid, kThreads, 0, stream_of(c)>>>(table.data, table.row_bytes, table.rows, table.cols, \
                                                                tokens, out, scale);                              \
    break;
    GRETA_HIP_FOR_EACH_WTYPE(GRETA_EMBED_CASE)
#undef GRETA_EMBED_CASE
  }
  check_launch("embed");
}

void launch_rmsnorm(const LaunchCtx& c, const float* in, const float* weight, float* out, int64_t rows, int64_t width,
                    float eps) {
  if (rows <= 0) return;
  rmsnorm_kernel<<<blocks_for(rows, 1), kThreads, 0, stream_of(c)>>>(in, weight, out, width, eps);
  check_launch("rmsnorm");
}

void launch_add_bias(const LaunchCtx& c, float* x, const float* bias, int64_t rows, int64_t width) {
  if (rows * width <= 0) return;
  add_bias_kernel<<<blocks_for(rows * width, kThreads), kThreads, 0, stream_of(c)>>>(x, bias, rows, width);
  check_launch("add_bias");
}

void launch_glu(const LaunchCtx& c, GluAct act, const float* gate, const float* up, float* out, int64_t n, float alpha,
                float limit) {
  if (n <= 0) return;
  const unsigned blocks = blocks_for(n, kThreads);
  switch (act) {
    case GluAct::SiLU:
      glu_kernel<GluAct::SiLU><<<blocks, kThreads, 0, stream_of(c)>>>(gate, up, out, n, alpha, limit);
      break;
    case GluAct::GeluTanh:
      glu_kernel<GluAct::GeluTanh><<<blocks, kThreads, 0, stream_of(c)>>>(gate, up, out, n, alpha, limit);
      break;
    case GluAct::SwiGluOai:
      glu_kernel<GluAct::SwiGluOai><<<blocks, kThreads, 0, stream_of(c)>>>(gate, up, out, n, alpha, limit);
      break;
  }
  check_launch("glu");
}

void launch_add(const LaunchCtx& c, float* x, const float* y, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream_of(c)>>>(x, y, n);
  check_launch("add");
}

void launch_rope(const LaunchCtx& c, float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                 int64_t head_dim, int64_t rope_dims, model::RopePairing pairing, float base, float freq_scale,
                 const float* freq_factors, const RopeScaling& scaling) {
  const int64_t n = n_tokens * n_heads * (rope_dims / 2);
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream_of(c)>>>(
      x, positions, n_tokens, n_heads, head_dim, rope_dims, pairing == model::RopePairing::Adjacent, base, freq_scale,
      freq_factors, scaling);
  check_launch("rope");
}

void launch_kv_write(const LaunchCtx& c, const float* src, void* cache, KvType type, const int32_t* rows,
                     int64_t n_tokens, int64_t width, int64_t cache_rows) {
  if (n_tokens <= 0 || width <= 0) return;
  GRETA_CHECK(n_tokens < 65536, "kv_write of ", n_tokens, " tokens");
  const dim3 grid(blocks_for(width, kThreads), unsigned(n_tokens));
  switch (type) {
    case KvType::F32:
      kv_write_kernel<<<grid, kThreads, 0, stream_of(c)>>>(src, static_cast<float*>(cache), rows, width, cache_rows);
      break;
    case KvType::F16:
      kv_write_kernel<<<grid, kThreads, 0, stream_of(c)>>>(src, static_cast<half_t*>(cache), rows, width, cache_rows);
      break;
    case KvType::Q8_0:
      GRETA_CHECK(width % kQ8Block == 0, "kv_write: q8_0 row of ", width, " elements (not whole blocks of 32)");
      kv_write_q8_kernel<<<dim3(blocks_for(width / kQ8Block, kThreads), unsigned(n_tokens)), kThreads, 0,
                           stream_of(c)>>>(src, static_cast<uint32_t*>(cache), rows, width, cache_rows);
      break;
  }
  check_launch("kv_write");
}

void launch_gather_rows(const LaunchCtx& c, const float* in, const int32_t* rows, float* out, int64_t n_rows,
                        int64_t width, int64_t in_rows) {
  if (n_rows <= 0 || width <= 0) return;
  GRETA_CHECK(n_rows < 65536, "gather of ", n_rows, " rows");
  const dim3 grid(blocks_for(width, kThreads), unsigned(n_rows));
  gather_rows_kernel<<<grid, kThreads, 0, stream_of(c)>>>(in, rows, out, width, in_rows);
  check_launch("gather_rows");
}

void launch_probe(const LaunchCtx& c) {
  probe_kernel<<<1, 1, 0, stream_of(c)>>>();
  check_launch("probe");
}

}  // namespace greta::hip
