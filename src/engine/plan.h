// The static execution plan: one forward pass of a llama-family model for a fixed shape (a step of n_tokens tokens
// from up to n_seqs sequences, over a paged KV cache), written as a flat list of ops over numbered buffers. It is
// built once per model and step-size bucket and replayed every step; only the step input (token ids, positions, KV
// rows, page tables, logit rows) changes between replays, so a GPU backend can record the ops into command buffers
// once and resubmit them.
//
// The paged KV cache (engine/kv_cache.h owns the pages; the plan only addresses them): every layer's K (and V) cache
// is one persistent buffer of n_pages * page_size rows. A sequence's position p lives in row
//   page_table[seq * pages_per_seq + p / page_size] * page_size + p % page_size
// where `seq` is the sequence's row in the step's page table. Page 0 is the padding sink: the padding tokens that
// fill a step up to its bucket write there and attend only to it, so they never touch a real sequence's pages.
//
// Buffers hold row-major matrices: a buffer "[n_tokens, dim]" stores token t's row at elements [t*dim, (t+1)*dim).
// Weights are [rows, cols] with `cols` the fastest-varying (GGUF's dims[0]); a matmul computes, for every token t and
// weight row r, out[t, r] = dot(weight row r, in row t).
#pragma once
#include <cstdint>
#include <functional>
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

// Q8_0: int8 per 32 elements with an f32 scale, KV caches only (engine/kv_q8.h: the layout).
enum class ElemType { F32, I32, F16, Q8_0 };
// "f32", "i32", "f16". Inline (as are the other small helpers below): the HIP plugin uses them without the engine.
inline const char* elem_type_name(ElemType type) {
  switch (type) {
    case ElemType::F32: return "f32";
    case ElemType::I32: return "i32";
    case ElemType::F16: return "f16";
    case ElemType::Q8_0: return "q8_0";
  }
  return "?";
}
// Bytes of `elems` elements (not rounded; Q8_0: whole blocks of 32, 36 bytes each).
inline uint64_t elem_bytes(ElemType type, int64_t elems) {
  if (type == ElemType::Q8_0) return uint64_t(elems / 32) * 36;
  return uint64_t(elems) * (type == ElemType::F16 ? 2u : 4u);
}

enum class BufferRole {
  Scratch,     // activations of one step; contents are meaningless between steps
  Persistent,  // model state shared by every plan of the model and kept between steps (the KV cache), found by name.
               // When a later plan declares it larger (the page pool grew), the backend enlarges it keeping the
               // contents; plans prepared before that must not run again (the engine drops them).
  Logits,      // the result: [n_logit_rows, vocab] (F32)
  // Step inputs (I32), written by the backend from the StepInput span of the same role before the ops run:
  Tokens,      // [n_tokens] token ids
  Positions,   // [n_tokens] each token's position in its sequence
  KvRows,      // [n_tokens] the cache row each token's K and V go to (see the top)
  SeqIndex,    // [n_tokens] each token's row of the page table
  PageTable,   // [n_seqs, pages_per_seq] page ids of the step's sequences
  LogitRows,   // [n_logit_rows] the tokens whose logits the step returns (only when n_logit_rows < n_tokens)
  // The sliding-window layers' own pool (KvLayout::n_pages_swa > 0), addressed as the others are:
  KvRowsSwa,   // [n_tokens] the row each token's K and V go to in that pool
  PageTableSwa,  // [n_seqs, pages_per_seq] its page ids (0 for pages a sequence gave up, before its window)
};
inline bool is_step_input(BufferRole role) {
  switch (role) {
    case BufferRole::Tokens:
    case BufferRole::Positions:
    case BufferRole::KvRows:
    case BufferRole::SeqIndex:
    case BufferRole::PageTable:
    case BufferRole::LogitRows:
    case BufferRole::KvRowsSwa:
    case BufferRole::PageTableSwa: return true;
    case BufferRole::Scratch:
    case BufferRole::Persistent:
    case BufferRole::Logits: return false;
  }
  return false;
}

struct BufferDecl {
  std::string name;  // "x", "q", "blk.3.k_cache": shown by verify mode and profiles
  // F32 activations and logits, I32 step inputs and MoE expert ids, F32, F16 or Q8_0 KV caches. Backends read()
  // and write() every F32, F16 or Q8_0 buffer as floats (F16 converted, round to nearest even; Q8_0 in whole blocks
  // of 32, engine/kv_q8.h), and I32 scratch buffers as floats too (the expert ids verify mode compares and resyncs).
  ElemType type = ElemType::F32;
  BufferRole role = BufferRole::Scratch;
  int64_t elems = 0;
};

// --- ops ----------------------------------------------------------------------------------------------------------
// Every op names its buffers and weights and carries the sizes it needs; nothing is implied by the op order.

// out[t, :] = scale * dequantized row tokens[t] of `table` (any weight type). gemma3 scales by sqrt(dim).
struct EmbedOp {
  WeightId table;     // [vocab, dim]
  BufferId tokens;    // [n_tokens] I32
  BufferId out;       // [n_tokens, dim]
  int64_t n_tokens, dim;
  float scale = 1.f;
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
// long-context rope, rope_freqs.weight; phi3's LongRoPE factors) is optional: kNoWeight means all ones.
//
// YaRN (ggml_rope_ext's ext_factor != 0): with e_i = positions[t] * base^(-2i / rope_dims) / freq_factors[i] the
// unscaled angle, ramp_i = 1 - clamp((i - yarn_low) / max(0.001, yarn_high - yarn_low), 0, 1) and
// mix_i = ramp_i * ext_factor, theta_i = freq_scale * e_i * (1 - mix_i) + e_i * mix_i, and both cos and sin are
// multiplied by attn_factor * (1 + 0.1 * ln(1 / freq_scale)). Without YaRN (ext_factor 0) they are multiplied by
// attn_factor alone. yarn_low/high are ggml_rope_yarn_corr_dims' (engine/rope_yarn.h computes them).
struct RopeOp {
  BufferId x;         // [n_tokens, n_heads, head_dim]
  BufferId positions; // [n_tokens] I32
  int64_t n_tokens, n_heads, head_dim, rope_dims;
  model::RopePairing pairing;
  float base, freq_scale;
  WeightId freq_factors = kNoWeight;  // [rope_dims / 2]
  float ext_factor = 0.f, attn_factor = 1.f;
  float yarn_low = 0.f, yarn_high = 0.f;
};

// cache[rows[t], :] = src[t, :] (converted to the cache's element type: F32, F16 with round to nearest even, or
// Q8_0 quantized per block of 32, engine/kv_q8.h, the width then a multiple of 32):
// stores this step's K (or V) rows in one layer's paged cache.
struct KvWriteOp {
  BufferId src;       // [n_tokens, width] F32
  BufferId cache;     // [cache_rows, width] F32, F16 or Q8_0, persistent
  BufferId rows;      // [n_tokens] I32: KvRows
  int64_t n_tokens, width, cache_rows;
};

// Causal attention over the paged cache: token t of sequence row s = seq[t] at position p = positions[t], query
// head h, attends to its sequence's keys j = j0..p of KV head g = h / (n_heads / n_kv_heads) (GQA; MQA when
// n_kv_heads = 1), key j at cache row R(s, j) = page_table[s * pages_per_seq + j / page_size] * page_size +
// j % page_size:
//   out[t, h, :] = sum_j softmax_j(scale * q[t, h, :] . k[R(s, j), g, :]) * v[R(s, j), g, :]
// j0 = 0, or with a sliding window (window > 0: gemma3, gpt-oss) j0 = max(0, p - window + 1): key j is seen when
// p - j < window (llama.cpp's LLAMA_SWA_TYPE_STANDARD). With sinks (gpt-oss), head h's softmax has one more logit,
// sinks[h], that takes part in the maximum and the denominator but adds no value row:
//   out[t, h, :] = sum_j e^(s_j - m) v_j / (e^(sinks[h] - m) + sum_j e^(s_j - m)),  m = max(sinks[h], max_j s_j).
// The engine guarantees: the tokens of one sequence are consecutive in the step with increasing positions; the
// table entries for j <= the largest position of the sequence in the step are valid pages (others are 0); K and V
// of this step's tokens are written (KvWriteOp) before the attention runs.
struct AttentionOp {
  BufferId q;          // [n_tokens, n_heads, head_dim] F32
  BufferId k_cache;    // [cache_rows, n_kv_heads, head_dim] F32, F16 or Q8_0
  BufferId v_cache;    // [cache_rows, n_kv_heads, head_dim_v] F32, F16 or Q8_0
  BufferId positions;  // [n_tokens] I32
  BufferId seq;        // [n_tokens] I32: SeqIndex
  BufferId page_table; // [n_seqs, pages_per_seq] I32: PageTable
  BufferId out;        // [n_tokens, n_heads, head_dim_v] F32
  int64_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v;
  int64_t n_seqs, page_size, pages_per_seq, cache_rows;
  float scale;         // 1 / sqrt(head_dim)
  // A hint from PlanShape::decode: every token is its sequence's only one in the step (a batched decode step). The
  // result is the same either way; backends use it to pick per-row split-K kernels over tiles of queries.
  bool one_query_per_seq = false;
  int64_t window = 0;           // sliding window in positions; 0: the whole sequence
  WeightId sinks = kNoWeight;   // [n_heads] F32 attention-sink logits, or none
};

// out[r, :] = in[rows[r], :] for r < n_rows: the rows whose logits a step returns (the last token of each sequence
// that asked for them), gathered before the final norm.
struct GatherRowsOp {
  BufferId in;        // [n_tokens, width]
  BufferId rows;      // [n_rows] I32: LogitRows
  BufferId out;       // [n_rows, width]
  int64_t n_rows, width;
};

// Gated linear unit, elementwise: out = act(gate) * up.
enum class GluKind {
  SiLU,       // silu(g) * u, silu(g) = g / (1 + exp(-g))   (llama, qwen2/3, phi3, qwen3moe)
  GeluTanh,   // gelu(g) * u, gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2)))   (gemma3)
  SwiGluOai,  // gpt-oss: x = min(g, limit), y = clamp(u, -limit, limit), out = x / (1 + exp(-alpha x)) * (y + 1)
};
inline const char* glu_kind_name(GluKind kind) {
  switch (kind) {
    case GluKind::SiLU: return "silu";
    case GluKind::GeluTanh: return "gelu_tanh";
    case GluKind::SwiGluOai: return "swiglu_oai";
  }
  return "?";
}
struct GluOp {
  BufferId gate, up, out;  // [n_tokens, ffn_dim] each (MoE: [n_tokens, k, ffn_dim])
  int64_t elems;
  GluKind kind = GluKind::SiLU;
  float alpha = 1.702f, limit = 7.f;  // SwiGluOai only
};

// --- mixture of experts: route, per-expert matmuls, weighted sum --------------------------------------------------

// How a token's router logits pick its experts and their weights.
enum class MoeGating {
  SoftmaxTopK,   // qwen3moe: p = softmax(logits); the k largest p; weights = those p (over their sum if normalize)
  TopKSoftmax,   // gpt-oss: the k largest logits; weights = softmax over those k logits
};
// experts[t, s], weights[t, s] for s < k: token t's experts by decreasing logit (ties to the lower expert id) and
// their weights. Normalizing divides by max(sum, 6.103515625e-5), as llama.cpp does.
struct MoeRouteOp {
  BufferId logits;    // [n_tokens, n_experts] F32 (router matmul, plus its bias when the model has one)
  BufferId experts;   // [n_tokens, k] I32
  BufferId weights;   // [n_tokens, k] F32
  int64_t n_tokens, n_experts, k;
  MoeGating gating = MoeGating::SoftmaxTopK;
  bool normalize = false;
};
// out[t, s, :] = W_e . in[t, i, :] (+ bias[e, :]) for e = experts[t, s], i = s when per_slot_input else 0.
// The weight is the 3-D expert tensor as a matrix of n_experts * out_features rows: expert e's row r is row
// e * out_features + r (GGUF's [in_features, out_features, n_experts]); the bias is [n_experts, out_features].
struct MoeMatMulOp {
  BufferId in;        // [n_tokens, 1 or k, in_features]
  BufferId experts;   // [n_tokens, k] I32
  BufferId out;       // [n_tokens, k, out_features]
  WeightId weight;    // [n_experts * out_features, in_features]
  WeightId bias = kNoWeight;  // [n_experts, out_features] F32, or none
  int64_t n_tokens, k, in_features, out_features, n_experts;
  bool per_slot_input = false;
};
// out[t, :] = sum over s = 0..k-1 (in that order) of weights[t, s] * in[t, s, :].
struct MoeCombineOp {
  BufferId in;        // [n_tokens, k, width]
  BufferId weights;   // [n_tokens, k] F32
  BufferId out;       // [n_tokens, width]
  int64_t n_tokens, k, width;
};

// x += y, elementwise (the residual connections).
struct AddOp {
  BufferId x, y;      // [n_tokens, dim] each
  int64_t elems;
};

using OpVariant = std::variant<EmbedOp, RmsNormOp, MatMulOp, AddBiasOp, RopeOp, KvWriteOp, AttentionOp, GluOp,
                               AddOp, GatherRowsOp, MoeRouteOp, MoeMatMulOp, MoeCombineOp>;

// variant order
enum class OpKind {
  Embed, RmsNorm, MatMul, AddBias, Rope, KvWrite, Attention, Glu, Add, GatherRows, MoeRoute, MoeMatMul, MoeCombine
};
const char* op_kind_name(OpKind kind);

struct PlanOp {
  std::string label;  // "blk.3.attn_q", "token_embd", "output": for verify mode and profiles
  int layer = -1;     // block index, -1 outside the blocks
  OpVariant op;
  OpKind kind() const { return static_cast<OpKind>(op.index()); }
};

// The paged KV cache as the plan sees it (see the top).
struct KvLayout {
  int64_t page_size = 32;      // positions per page
  int64_t n_pages = 0;         // pages in every layer's pool, the padding sink (page 0) included
  int64_t pages_per_seq = 0;   // page-table width: ceil(the context per sequence / page_size)
  ElemType type = ElemType::F16;
  // > 0: the sliding-window layers have their own pool of this many pages (the sink included), its own page table
  // and KV rows (the *Swa step inputs); the engine gives up its pages before each sequence's window. 0: every
  // layer uses the one pool.
  int64_t n_pages_swa = 0;
  int64_t cache_rows() const { return n_pages * page_size; }
  int64_t swa_cache_rows() const { return n_pages_swa * page_size; }
};

// What one plan computes.
struct PlanShape {
  int64_t n_tokens = 1;      // tokens per step (a bucket: padding tokens fill what the step does not use)
  int64_t n_seqs = 1;        // page-table rows: sequences per step at most (a padding row included)
  int64_t n_logit_rows = 1;  // logit rows returned; == n_tokens: every token's, in token order (no gather)
  KvLayout kv;
  bool decode = false;       // steps of one token per sequence (AttentionOp::one_query_per_seq); a hint only

  // One sequence of up to ctx positions, pages 1..pages_per_seq (single_sequence_step): verify mode, op tests, tools.
  static PlanShape single(int64_t n_tokens, int64_t ctx, bool all_logits, ElemType kv_type = ElemType::F16);
};

struct Plan {
  PlanShape shape;
  int64_t vocab = 0;
  int64_t n_logit_rows = 0;  // = shape.n_logit_rows
  std::vector<BufferDecl> buffers;
  std::vector<PlanOp> ops;
  BufferId tokens = kNoBuffer, positions = kNoBuffer, logits = kNoBuffer;

  BufferId add_buffer(std::string name, ElemType type, BufferRole role, int64_t elems);
  // The plan's step-input buffer of `role`; kNoBuffer when it has none.
  BufferId input_buffer(BufferRole role) const;
  // Multi-line listing "  12 blk.0.attn_q   matmul ..." for debugging and docs.
  std::string describe() const;
};

// The variable part of a step: one span per step-input role, each exactly as long as the plan's buffer of that role
// (empty for a role the plan lacks). Padding entries are the engine's (kv row 0, sequence row of sink pages,
// position 0). Backends copy the spans into their buffers; they do not interpret them beyond what the ops define.
struct StepInput {
  std::span<const int32_t> tokens, positions, kv_rows, seq, page_table, logit_rows;
  std::span<const int32_t> kv_rows_swa, page_table_swa;
  // The engine's next call is execute() of another pass of the same step, with nothing read in between: a backend
  // may return before this pass is done and overlap the two (a layer split pipelines them over its devices).
  bool another_pass_follows = false;
  std::span<const int32_t> for_role(BufferRole role) const {
    switch (role) {
      case BufferRole::Tokens: return tokens;
      case BufferRole::Positions: return positions;
      case BufferRole::KvRows: return kv_rows;
      case BufferRole::SeqIndex: return seq;
      case BufferRole::PageTable: return page_table;
      case BufferRole::LogitRows: return logit_rows;
      case BufferRole::KvRowsSwa: return kv_rows_swa;
      case BufferRole::PageTableSwa: return page_table_swa;
      case BufferRole::Scratch:
      case BufferRole::Persistent:
      case BufferRole::Logits: return {};
    }
    return {};
  }
  // 1 + the largest position (the longest key range of the step), at least 1.
  int64_t max_len() const;
};

// Owned step arrays, viewed as a StepInput.
struct StepArrays {
  std::vector<int32_t> tokens, positions, kv_rows, seq, page_table, logit_rows;
  std::vector<int32_t> kv_rows_swa, page_table_swa;
  bool another_pass_follows = false;
  StepInput view() const {
    return {tokens, positions, kv_rows, seq, page_table, logit_rows, kv_rows_swa, page_table_swa, another_pass_follows};
  }
};

// A step of one sequence (page-table row 0) whose position p lives on page 1 + p / page_size: `tokens` at positions
// start_pos.. (padded to the plan's n_tokens with sink tokens), the logits of the last token (or of every token when
// the plan returns every row). For PlanShape::single plans: verify mode, op tests, kernel benches, the tuner.
StepArrays single_sequence_step(const Plan& plan, std::span<const int32_t> tokens, int64_t start_pos);

// Builds the forward pass of `config`'s architecture. Throws greta::Error for shapes it cannot plan.
Plan build_plan(const model::ModelConfig& config, const ModelWeights& weights, const PlanShape& shape);

// Features of ops beyond the plain llama block, so that a backend that lacks one refuses the plan with a clear
// message at prepare() instead of computing something else. A backend lists what it has (Backend::features).
enum OpFeature : uint32_t {
  kFeatureEmbedScale = 1u << 0,     // EmbedOp::scale != 1
  kFeatureRopeScaling = 1u << 1,    // RopeOp: YaRN (ext_factor) or attn_factor != 1
  kFeatureSlidingWindow = 1u << 2,  // AttentionOp::window
  kFeatureSinks = 1u << 3,          // AttentionOp::sinks
  kFeatureGeluGlu = 1u << 4,        // GluOp GeluTanh
  kFeatureOaiGlu = 1u << 5,         // GluOp SwiGluOai
  kFeatureMoe = 1u << 6,            // MoeRouteOp, MoeMatMulOp, MoeCombineOp
};
inline constexpr uint32_t kAllOpFeatures = (1u << 7) - 1;
uint32_t op_features(const PlanOp& op);
// "sliding-window attention, attention sinks" for a set of features.
std::string feature_names(uint32_t features);
// Throws greta::Error naming the first op of `plan` that needs a feature outside `supported`.
void require_features(const Plan& plan, uint32_t supported, const std::string& backend);

// The elements an op writes (verify mode compares exactly these). For KvWrite these are the step's rows of the
// cache, one region per token.
struct BufferRegion {
  BufferId buffer = kNoBuffer;
  int64_t offset = 0, count = 0;
};
std::vector<BufferRegion> written_regions(const PlanOp& op, const StepInput& step);
// The buffer an op writes (whatever the step).
BufferId written_buffer(const PlanOp& op);
// Every buffer an op writes: written_buffer's, and the expert ids a MoE route writes beside its weights.
std::vector<BufferId> written_buffers(const PlanOp& op);
// The buffers an op reads (for verify's resync and for backends that track hazards).
std::vector<BufferId> read_buffers(const PlanOp& op);
// Calls `buffer` on every BufferId field of an op and `weight` on every WeightId field (kNoWeight ones too), by
// reference: for code that moves ops into another plan and renumbers them (engine/split_backend.cpp).
void for_each_ref(OpVariant& op, const std::function<void(BufferId&)>& buffer,
                  const std::function<void(WeightId&)>& weight);

}  // namespace greta::engine
