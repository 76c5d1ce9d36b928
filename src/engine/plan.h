// The static execution plan: one forward pass of a llama-family model for a fixed shape (n_tokens tokens appended to
// a KV cache of ctx positions), written as a flat list of ops over numbered buffers. It is built once per model and
// shape and replayed every step; only the step input (token ids, start position) changes between replays, so a GPU
// backend can record the ops into command buffers once and resubmit them.
//
// Buffers hold row-major matrices: a buffer "[n_tokens, dim]" stores token t's row at elements [t*dim, (t+1)*dim).
// Weights are [rows, cols] with `cols` the fastest-varying (GGUF's dims[0]); a matmul computes, for every token t and
// weight row r, out[t, r] = dot(weight row r, in row t).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "model/model_config.h"

namespace greta::engine {

struct ModelWeights;

using BufferId = int32_t;
using WeightId = int32_t;
inline constexpr BufferId kNoBuffer = -1;
inline constexpr WeightId kNoWeight = -1;

enum class ElemType { F32, I32 };

enum class BufferRole {
  Scratch,     // activations of one step; contents are meaningless between steps
  Persistent,  // model state shared by every plan of the model and kept between steps (the KV cache), found by name
  Tokens,      // step input: n_tokens token ids (I32), written by the backend from StepInput before the ops run
  Positions,   // step input: n_tokens positions (I32) = start_pos + t
  Logits,      // the result: [n_logit_rows, vocab] (F32)
};

struct BufferDecl {
  std::string name;  // "x", "q", "blk.3.k_cache": shown by verify mode and profiles
  ElemType type = ElemType::F32;
  BufferRole role = BufferRole::Scratch;
  int64_t elems = 0;
};

// --- ops ----------------------------------------------------------------------------------------------------------
// Every op names its buffers and weights and carries the sizes it needs; nothing is implied by the op order.

// out[t, :] = dequantized row tokens[t] of `table` (any weight type).
struct EmbedOp {
  WeightId table;     // [vocab, dim]
  BufferId tokens;    // [n_tokens] I32
  BufferId out;       // [n_tokens, dim]
  int64_t n_tokens, dim;
};

// out[r, :] = in[in_row_offset + r, :] / sqrt(mean(in row^2) + eps) * weight. The per-head Q/K norm of qwen3 is the
// same op over rows = n_tokens * n_heads of width head_dim. in_row_offset lets the final norm take only the last row.
struct RmsNormOp {
  BufferId in;        // [in_row_offset + rows, width]
  BufferId out;       // [rows, width] (may equal `in` when in_row_offset is 0)
  WeightId weight;    // [width]
  int64_t rows, width;
  int64_t in_row_offset = 0;
  float eps;
};

// out[t, r] = dot(weight row r, in[t, :]) for t < n_tokens, r < out_features; any weight type.
struct MatMulOp {
  BufferId in;        // [n_tokens, in_features]
  BufferId out;       // [n_tokens, out_features]
  WeightId weight;    // [out_features, in_features]
  int64_t n_tokens, in_features, out_features;
};

// x[t, :] += bias for every row (qwen2's Q/K/V biases).
struct AddBiasOp {
  BufferId x;         // [rows, width]
  WeightId bias;      // [width]
  int64_t rows, width;
};

// In-place rotary embedding of the first rope_dims of each head at position positions[t]:
// theta_i = positions[t] * freq_scale * base^(-2i / rope_dims) / freq_factors[i], i < rope_dims/2, rotating the
// pair (x[2i], x[2i+1]) for Adjacent or (x[i], x[i + rope_dims/2]) for NeoxHalves. freq_factors (Llama-3.1-style
// long-context rope, rope_freqs.weight) is optional: kNoWeight means all ones.
struct RopeOp {
  BufferId x;         // [n_tokens, n_heads, head_dim]
  BufferId positions; // [n_tokens] I32
  int64_t n_tokens, n_heads, head_dim, rope_dims;
  model::RopePairing pairing;
  float base, freq_scale;
  WeightId freq_factors = kNoWeight;  // [rope_dims / 2]
};

// cache[positions[t], :] = src[t, :]: appends this step's K (or V) rows to one layer's cache.
struct KvWriteOp {
  BufferId src;       // [n_tokens, width]
  BufferId cache;     // [ctx, width] persistent
  BufferId positions; // [n_tokens] I32
  int64_t n_tokens, width, ctx;
};

// Causal attention over the cache: token t (at position p = positions[t]) and query head h attend to cache rows
// 0..p of KV head h / (n_heads / n_kv_heads) (GQA; MQA when n_kv_heads = 1):
//   out[t, h, :] = sum_j softmax_j(scale * q[t, h, :] . k[j, kvh, :]) * v[j, kvh, :]
struct AttentionOp {
  BufferId q;         // [n_tokens, n_heads, head_dim]
  BufferId k_cache;   // [ctx, n_kv_heads, head_dim]
  BufferId v_cache;   // [ctx, n_kv_heads, head_dim_v]
  BufferId positions; // [n_tokens] I32
  BufferId out;       // [n_tokens, n_heads, head_dim_v]
  int64_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v, ctx;
  float scale;        // 1 / sqrt(head_dim)
};

// out = silu(gate) * up, elementwise; silu(g) = g / (1 + exp(-g)).
struct SwiGluOp {
  BufferId gate, up, out;  // [n_tokens, ffn_dim] each
  int64_t elems;
};

// x += y, elementwise (the residual connections).
struct AddOp {
  BufferId x, y;      // [n_tokens, dim] each
  int64_t elems;
};

using OpVariant =
    std::variant<EmbedOp, RmsNormOp, MatMulOp, AddBiasOp, RopeOp, KvWriteOp, AttentionOp, SwiGluOp, AddOp>;

enum class OpKind { Embed, RmsNorm, MatMul, AddBias, Rope, KvWrite, Attention, SwiGlu, Add };  // variant order
const char* op_kind_name(OpKind kind);

struct PlanOp {
  std::string label;  // "blk.3.attn_q", "token_embd", "output": for verify mode and profiles
  int layer = -1;     // block index, -1 outside the blocks
  OpVariant op;
  OpKind kind() const { return static_cast<OpKind>(op.index()); }
};

// What one plan computes.
struct PlanShape {
  int64_t n_tokens = 1;     // tokens per step (1: decode)
  int64_t ctx = 0;          // KV cache positions
  bool all_logits = false;  // logits for every token (teacher forcing, perplexity) or only for the last one
};

struct Plan {
  PlanShape shape;
  int64_t vocab = 0;
  int64_t n_logit_rows = 0;  // n_tokens when all_logits, else 1
  std::vector<BufferDecl> buffers;
  std::vector<PlanOp> ops;
  BufferId tokens = kNoBuffer, positions = kNoBuffer, logits = kNoBuffer;

  BufferId add_buffer(std::string name, ElemType type, BufferRole role, int64_t elems);
  // Multi-line listing "  12 blk.0.attn_q   matmul ..." for debugging and docs.
  std::string describe() const;
};

// The variable part of a step: n_tokens token ids appended at positions start_pos .. start_pos + n_tokens - 1.
// After the step the cache holds start_pos + n_tokens positions (the KV length).
struct StepInput {
  std::span<const int32_t> tokens;
  int64_t start_pos = 0;
};

// Builds the forward pass of `config`'s architecture. Throws greta::Error for shapes it cannot plan.
Plan build_plan(const model::ModelConfig& config, const ModelWeights& weights, const PlanShape& shape);

// The elements an op writes (verify mode compares exactly these). For KvWrite that depends on the step's positions.
struct BufferRegion {
  BufferId buffer = kNoBuffer;
  int64_t offset = 0, count = 0;
};
BufferRegion written_region(const PlanOp& op, const StepInput& step);
// The buffers an op reads (for verify's resync and for backends that track hazards).
std::vector<BufferId> read_buffers(const PlanOp& op);

}  // namespace greta::engine
