// Host-side launchers of the HIP backend's kernels (k_*.hip). Plain C++ types only: a launch context carries the
// stream and the device facts the launch geometry depends on (wave size, matrix cores). Every launcher checks the
// launch and throws greta::Error naming the kernel on failure. Pointers are device pointers.
#pragma once
#include <cstdint>

#include "hip/dequant.h"
#include "model/model_config.h"

namespace greta::hip {

struct LaunchCtx {
  void* stream = nullptr;  // gpuStream_t
  int wave = 64;           // the device's wave (warp) size
  bool mma = false;        // the device has matrix cores this build has code for (MFMA, WMMA, mma.sync)
};

// A weight as the kernels see it: `rows` rows of `cols` weights of `type`, row r at data + r * row_bytes.
struct DeviceWeight {
  WType type = WType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;
};

// out[t, :] = row tokens[t] of table (ids outside [0, rows) give zeros: the engine rejects them before).
void launch_embed(const LaunchCtx& c, const DeviceWeight& table, const int32_t* tokens, int64_t n_tokens, float* out);
// out[r, :] = in[r, :] * weight / sqrt(mean(in[r, :]^2) + eps); out may alias in.
void launch_rmsnorm(const LaunchCtx& c, const float* in, const float* weight, float* out, int64_t rows, int64_t width,
                    float eps);
void launch_add_bias(const LaunchCtx& c, float* x, const float* bias, int64_t rows, int64_t width);
void launch_swiglu(const LaunchCtx& c, const float* gate, const float* up, float* out, int64_t n);
void launch_add(const LaunchCtx& c, float* x, const float* y, int64_t n);
void launch_rope(const LaunchCtx& c, float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                 int64_t head_dim, int64_t rope_dims, model::RopePairing pairing, float base, float freq_scale,
                 const float* freq_factors);
// cache[positions[t], :] = src[t, :] (positions outside [0, ctx) are skipped).
void launch_kv_write(const LaunchCtx& c, const float* src, float* cache, const int32_t* positions, int64_t n_tokens,
                     int64_t width, int64_t ctx);

// Decode matmul (fp32, weights decoded in registers): out[t, r] = dot(w row r, in[t, :]) for t < n_tokens.
// Any n_tokens; tokens are processed kMatvecTokens at a time per pass over the weights.
inline constexpr int kMatvecTokens = 8;
void launch_matvec(const LaunchCtx& c, const DeviceWeight& w, const float* in, float* out, int64_t n_tokens);

// Prefill matmul on matrix cores. `a_half` ([n_tokens, cols] fp16) and `inv_scale` ([n_tokens]) are scratch
// filled by the launcher from `in`.
void launch_gemm(const LaunchCtx& c, const DeviceWeight& w, const float* in, float* out, int64_t n_tokens,
                 void* a_half, float* inv_scale);

struct AttentionArgs {
  const float* q;            // [n_tokens, n_heads, head_dim]
  const float* k_cache;      // [ctx, n_kv_heads, head_dim]
  const float* v_cache;      // [ctx, n_kv_heads, head_dim_v]
  const int32_t* positions;  // [n_tokens]
  float* out;                // [n_tokens, n_heads, head_dim_v]
  int64_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v, ctx;
  float scale;
};
// Scratch floats the split-K decode attention needs for n_splits splits.
int64_t attention_partials_elems(const AttentionArgs& a, int n_splits);
int attention_splits(int64_t ctx);
// fp32 attention (decode; any shape): `partials` holds attention_partials_elems(a, attention_splits(ctx)) floats.
void launch_attention_decode(const LaunchCtx& c, const AttentionArgs& a, float* partials);
// Flash attention on matrix cores (prefill); head_dim and head_dim_v <= 256.
bool attention_prefill_supported(const LaunchCtx& c, const AttentionArgs& a);
void launch_attention_prefill(const LaunchCtx& c, const AttentionArgs& a);

// A kernel that touches nothing: launching it tells whether this build has code for the device.
void launch_probe(const LaunchCtx& c);

}  // namespace greta::hip
