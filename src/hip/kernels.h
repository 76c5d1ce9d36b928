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

// out[t, :] = scale * row tokens[t] of table (ids outside [0, rows) give zeros: the engine rejects them before).
// The product is the CPU's (decoded value, then one fp32 multiply), so scale = sqrt(dim) (gemma3) stays exact.
void launch_embed(const LaunchCtx& c, const DeviceWeight& table, const int32_t* tokens, int64_t n_tokens, float* out,
                  float scale = 1.f);
// out[r, :] = in[r, :] * weight / sqrt(mean(in[r, :]^2) + eps); out may alias in.
void launch_rmsnorm(const LaunchCtx& c, const float* in, const float* weight, float* out, int64_t rows, int64_t width,
                    float eps);
void launch_add_bias(const LaunchCtx& c, float* x, const float* bias, int64_t rows, int64_t width);
// Gated linear units (engine::GluOp), elementwise in fp32: out = act(gate) * up.
enum class GluAct : uint8_t { SiLU, GeluTanh, SwiGluOai };
void launch_glu(const LaunchCtx& c, GluAct act, const float* gate, const float* up, float* out, int64_t n,
                float alpha = 1.702f, float limit = 7.f);
void launch_add(const LaunchCtx& c, float* x, const float* y, int64_t n);
// engine::RopeOp's YaRN fields: ext_factor 0 and attn_factor 1 is plain rope.
struct RopeScaling {
  float ext_factor = 0.f, attn_factor = 1.f, low = 0.f, high = 0.f;
};
void launch_rope(const LaunchCtx& c, float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads,
                 int64_t head_dim, int64_t rope_dims, model::RopePairing pairing, float base, float freq_scale,
                 const float* freq_factors, const RopeScaling& scaling = {});
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
// p = positions[t] attends to keys j = j0..p of its sequence (j0 = 0, or max(0, p - window + 1) with a sliding
// window), key j at cache row
//   page_table[s * pages_per_seq + j / page_size] * page_size + j % page_size.
// The caches are fp32, fp16 or q8_0 (`cache`, kv_cache.h; both K and V of a layer have the same type; q8_0 rows
// n_kv_heads * head_dim(_v) are whole blocks of 32). Positions are clamped to
// [0, max_len()), sequence rows to [0, n_seqs) and cache rows outside [0, cache_rows) read as zero keys, so a bad step
// input gives wrong numbers, never an out-of-bounds access (the engine validates the step before).
// Sinks (gpt-oss): head h's softmax has one more logit sinks[h] in its maximum and denominator, with no value row.
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
  int64_t window = 0;              // sliding window in positions (key j seen when p - j < window); 0: none
  const float* sinks = nullptr;    // [n_heads] sink logits, or null
  // The longest position range of the cache: positions are clamped to it.
  GRETA_HD int64_t max_len() const { return page_size * pages_per_seq; }
  // The most keys one token attends to: every split-K grid is sized by it (a plan constant, so captured graphs stay
  // valid whatever the step's positions).
  GRETA_HD int64_t max_keys() const { return window > 0 && window < max_len() ? window : max_len(); }
};
// Scratch floats the split-K decode attention needs for n_splits splits.
int64_t attention_partials_elems(const AttentionArgs& a, int n_splits);
int attention_splits(int64_t max_len);
// fp32 attention (decode; any shape): `partials` holds attention_partials_elems(a, attention_splits(a.max_keys()))
// floats.
void launch_attention_decode(const LaunchCtx& c, const AttentionArgs& a, float* partials);
// Flash attention on matrix cores (prefill); head_dim and head_dim_v <= 256.
bool attention_prefill_supported(const LaunchCtx& c, const AttentionArgs& a);
void launch_attention_prefill(const LaunchCtx& c, const AttentionArgs& a);

// ---- mixture of experts (k_moe.hip) --------------------------------------------------------------------------------
// engine::MoeRouteOp: experts[t, s], weights[t, s] for s < k (by decreasing logit, ties to the lower id). Softmax in
// fp64 as the CPU. n_experts <= kMoeMaxExperts.
inline constexpr int64_t kMoeMaxExperts = 4096;
void launch_moe_route(const LaunchCtx& c, const float* logits, int32_t* experts, float* weights, int64_t n_tokens,
                      int64_t n_experts, int64_t k, bool topk_then_softmax, bool normalize);
// engine::MoeMatMulOp. `w` is the whole 3-D expert tensor (n_experts * out_features rows); bias null or
// [n_experts, out_features] fp32. in: [n_tokens, per_slot_input ? k : 1, cols]; out: [n_tokens, k, out_features].
// Expert ids outside [0, n_experts) give zero rows (the route never writes them).
struct MoeArgs {
  DeviceWeight w;
  const float* bias = nullptr;
  const float* in = nullptr;
  const int32_t* experts = nullptr;
  float* out = nullptr;
  int64_t n_tokens = 0, k = 0, out_features = 0, n_experts = 0;
  bool per_slot_input = false;
  int64_t slots() const { return n_tokens * k; }
  int64_t in_rows() const { return per_slot_input ? n_tokens * k : n_tokens; }
};
// fp32 matvec per slot, reading only the chosen experts' rows (decode; any weight type).
void launch_moe_matvec(const LaunchCtx& c, const MoeArgs& a);
// Grouped GEMM on matrix cores (prefill): slots grouped by expert on the device, then one launch over (expert,
// 64-slot tile) x 64-row output tiles. Scratch: moe_gemm_scratch_bytes(a) bytes, 256-byte aligned.
uint64_t moe_gemm_scratch_bytes(const MoeArgs& a);
void launch_moe_gemm(const LaunchCtx& c, const MoeArgs& a, void* scratch);
// The most (expert, tile) pairs a grouping of `slots` slots over n_experts experts can need (tiles of `tile` slots):
// the grouped GEMM's grid is sized by it, so it is fixed per plan.
int64_t moe_max_tiles(int64_t slots, int64_t n_experts, int64_t tile);
// engine::MoeCombineOp: out[t, :] = sum over s (in order) of weights[t, s] * in[t, s, :].
void launch_moe_combine(const LaunchCtx& c, const float* in, const float* weights, float* out, int64_t n_tokens,
                        int64_t k, int64_t width);

// A kernel that touches nothing: launching it tells whether this build has code for the device.
void launch_probe(const LaunchCtx& c);

}  // namespace greta::hip
