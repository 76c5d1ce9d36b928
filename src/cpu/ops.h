// The CPU reference kernels, one file per op (op_*.cpp). They take plain pointers so tests can call them directly on
// random data. Activations are fp32; accumulations that need it (norm sums, softmax sums, attention weighted sums)
// are fp64. Each kernel splits its outputs into disjoint contiguous ranges across the pool and never reduces across
// threads, so results are bit-identical for any thread count.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "engine/plan.h"
#include "model/model_config.h"
#include "model/tensor_types.h"

namespace greta::cpu {

// A weight matrix in its stored format: `rows` rows of `cols` elements, row r at data + r * row_bytes.
struct WeightView {
  model::GgmlType type = model::GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;
  const uint8_t* row(int64_t r) const { return data + uint64_t(r) * row_bytes; }
};

// The dot product every matmul uses: 8 fp32 lanes (lane l sums elements l, l+8, ...), folded in a fixed order.
// One function for decode and prefill, so a token's logits do not depend on how the prompt was batched.
float dot_f32(const float* a, const float* b, int64_t n);

// out[t, :] = dequantized row tokens[t] of table. Tokens must be < table.rows (checked: throws greta::Error).
void embed(ThreadPool& pool, const WeightView& table, const int32_t* tokens, int64_t n_tokens, float* out);

// out[r, :] = in[r, :] * weight / sqrt(mean(in[r, :]^2) + eps); out may alias in.
void rmsnorm(ThreadPool& pool, const float* in, const float* weight, float* out, int64_t rows, int64_t width,
             float eps);

// out[t, r] = dot(w row r, in[t, :]), t < n_tokens; in is [n_tokens, w.cols], out is [n_tokens, w.rows].
void matmul(ThreadPool& pool, const WeightView& w, const float* in, float* out, int64_t n_tokens);

// x[r, :] += bias.
void add_bias(ThreadPool& pool, float* x, const float* bias, int64_t rows, int64_t width);

// In-place rotary embedding; x is [n_tokens, n_heads, head_dim] (see RopeOp in engine/plan.h). freq_factors is
// [rope_dims / 2] or null (all ones).
// yarn: ext_factor, attn_factor and the correction dims of RopeOp (all defaults: plain rope).
struct RopeYarn {
  float ext_factor = 0.f, attn_factor = 1.f, low = 0.f, high = 0.f;
};
void rope(ThreadPool& pool, float* x, const int32_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          int64_t rope_dims, model::RopePairing pairing, float base, float freq_scale,
          const float* freq_factors = nullptr, const RopeYarn& yarn = {});

// A KV cache as stored: `rows` rows of f32, f16 or q8_0 (engine::ElemType; q8_0: engine/kv_q8.h).
struct CacheView {
  void* data = nullptr;
  engine::ElemType type = engine::ElemType::F32;
  int64_t rows = 0;
};

// cache[rows[t], :] = src[t, :] (rounded to f16, or quantized per block of 32, for those caches); rows must lie in
// [0, cache.rows) (checked).
void kv_write(const float* src, const CacheView& cache, const int32_t* rows, int64_t n_tokens, int64_t width);

// Paged causal attention (engine::AttentionOp): token t of page-table row seq[t] at position positions[t].
struct AttentionArgs {
  const float* q;            // [n_tokens, n_heads, head_dim]
  CacheView k_cache;         // [cache rows, n_kv_heads, head_dim]
  CacheView v_cache;         // [cache rows, n_kv_heads, head_dim_v]
  const int32_t* positions;  // [n_tokens]
  const int32_t* seq;        // [n_tokens]
  const int32_t* page_table; // [n_seqs, pages_per_seq]
  float* out;                // [n_tokens, n_heads, head_dim_v]
  int64_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v;
  int64_t n_seqs, page_size, pages_per_seq;
  float scale;
  int64_t window = 0;             // sliding window (0: none)
  const float* sinks = nullptr;   // [n_heads] sink logits, or null
};
void attention(ThreadPool& pool, const AttentionArgs& a);

// out[r, :] = in[rows[r], :]; rows must lie in [0, in_rows) (checked).
void gather_rows(const float* in, const int32_t* rows, float* out, int64_t n_rows, int64_t width, int64_t in_rows);

// out = act(gate) * up (engine::GluKind); out may alias gate or up. alpha, limit: SwiGluOai's.
void glu(ThreadPool& pool, engine::GluKind kind, const float* gate, const float* up, float* out, int64_t n,
         float alpha = 1.702f, float limit = 7.f);

// Mixture of experts (engine/plan.h, MoeRouteOp ...).
void moe_route(ThreadPool& pool, const float* logits, int32_t* experts, float* weights, int64_t n_tokens,
               int64_t n_experts, int64_t k, engine::MoeGating gating, bool normalize);
struct MoeMatMulArgs {
  WeightView weight;         // [n_experts * out_features, in_features]
  WeightView bias;           // [n_experts, out_features] F32; data null when none
  const float* in;           // [n_tokens, per_slot_input ? k : 1, in_features]
  const int32_t* experts;    // [n_tokens, k]
  float* out;                // [n_tokens, k, out_features]
  int64_t n_tokens, k, in_features, out_features, n_experts;
  bool per_slot_input;
};
void moe_matmul(ThreadPool& pool, const MoeMatMulArgs& a);
void moe_combine(ThreadPool& pool, const float* in, const float* weights, float* out, int64_t n_tokens, int64_t k,
                 int64_t width);

// x += y.
void add(ThreadPool& pool, float* x, const float* y, int64_t n);

}  // namespace greta::cpu
