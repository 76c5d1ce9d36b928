// Host-side launchers of the HIP backend's kernels (k_*.hip). Plain C++ types only: a launch context carries the
// stream and the device facts the launch geometry depends on (wave size, matrix cores). Every launcher checks the
// launch and throws greta::Error naming the kernel on failure. Pointers are device pointers.
#pragma once
#include <cstdint>

#include "hip/dequant.h"
#include "hip/kv_cache.h"
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
// cache[rows[t], :] = src[t, :], converted to the cache's element type (fp16: round to nearest even; q8_0: each block
// of 32 quantized as engine/kv_q8.h's kv_q8_quantize, bit-identical; width % 32 == 0). Rows outside [0, cache_rows)
// are skipped (the engine rejects them before).
void launch_kv_write(const LaunchCtx& c, const float* src, void* cache, KvType type, const int32_t* rows,
                     int64_t n_tokens, int64_t width, int64_t cache_rows);
// out[r, :] = in[rows[r], :] for r < n_rows; rows outside [0, in_rows) give zeros. in and out must not overlap.
void launch_gather_rows(const LaunchCtx& c, const float* in, const int32_t* rows, float* out, int64_t n_rows,
                        int64_t width, int64_t in_rows);

// Decode matmul (fp32, weights decoded in registers): out[t, r] = dot(w row r, in[t, :]) for t < n_tokens.
// Any n_tokens; tokens are processed kMatvecTokens at a time per pass over the weights.
inline constexpr int kMatvecTokens = 8;
void launch_matvec(const LaunchCtx& c, const DeviceWeight& w, const float* in, float* out, int64_t n_tokens);

// Prefill matmul on matrix cores. `a_half` ([n_tokens, cols] fp16) and `inv_scale` ([n_tokens]) are scratch
// filled by the launcher from `in`.
void launch_gemm(const LaunchCtx& c, const DeviceWeight& w, const float* in, float* out, int64_t n_tokens,
                 void* a_half, float* inv_scale);

// Causal attention over the paged KV cache (engine::AttentionOp): token t of page-table row s = seq[t] at position
// p = positions[t] attends to keys j = 0..p of its sequence, key j at cache row
//   page_table[s * pages_per_seq + j / page_size] * page_size + j % page_size.
// The caches are fp32, fp16 or q8_0 (`cache`, kv_cache.h; both K and V of a layer have the same type; q8_0 rows
// n_kv_heads * head_dim(_v) are whole blocks of 32). Positions are clamped to
// [0, max_len()), sequence rows to [0, n_seqs) and cache rows outside [0, cache_rows) read as zero keys, so a bad step
// input gives wrong numbers, never an out-of-bounds access (the engine validates the step before).
struct AttentionArgs {
  const float* q;             // [n_tokens, n_heads, head_dim]
  const void* k_cache;        // [cache_rows, n_kv_heads, head_dim] f32, f16 or q8_0 blocks
  const void* v_cache;        // [cache_rows, n_kv_heads, head_dim_v] f32, f16 or q8_0 blocks
  const int32_t* positions;   // [n_tokens]
  const int32_t* seq;         // [n_tokens] page-table row of each token
  const int32_t* page_table;  // [n_seqs, pages_per_seq]
  float* out;                 // [n_tokens, n_heads, head_dim_v]
  int64_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v;
  int64_t n_seqs, page_size, pages_per_seq, cache_rows;
  float scale;
  KvType cache;
  bool one_query_per_seq = false;  // a batched decode step (AttentionOp's hint): split-K per row, not query tiles
  // The longest key range a token can have: every split-K grid is sized by it (a plan constant, so captured graphs
  // stay valid whatever the step's positions).
  GRETA_HD int64_t max_len() const { return page_size * pages_per_seq; }
};
// Scratch floats the split-K decode attention needs for n_splits splits.
int64_t attention_partials_elems(const AttentionArgs& a, int n_splits);
int attention_splits(int64_t max_len);
// fp32 attention (decode; any shape): `partials` holds attention_partials_elems(a, attention_splits(a.max_len()))
// floats.
void launch_attention_decode(const LaunchCtx& c, const AttentionArgs& a, float* partials);
// Flash attention on matrix cores (prefill); head_dim and head_dim_v <= 256.
bool attention_prefill_supported(const LaunchCtx& c, const AttentionArgs& a);
void launch_attention_prefill(const LaunchCtx& c, const AttentionArgs& a);

// A kernel that touches nothing: launching it tells whether this build has code for the device.
void launch_probe(const LaunchCtx& c);

}  // namespace greta::hip
