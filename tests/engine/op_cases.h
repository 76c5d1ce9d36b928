// The single-op cases every GPU backend's op tests run against the CPU reference (tests/vk/vk_ops_test.cpp,
// tests/hip/hip_backend_test.cpp): the same shapes, seeds and inputs for every backend, so their results compare.
// Each builder returns an engine::OpCase and the buffers to check; the suites add their own kernel choices and
// tolerances. Random inputs everywhere (never zeros), odd sizes on purpose.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <variant>
#include <vector>

#include "engine/op_case.h"
#include "engine/plan.h"
#include "model/tensor_types.h"

namespace greta::test {

inline constexpr model::GgmlType k_all_weight_types[] = {
    model::GgmlType::F32,  model::GgmlType::F16,  model::GgmlType::BF16, model::GgmlType::Q4_0, model::GgmlType::Q4_1,
    model::GgmlType::Q5_0, model::GgmlType::Q5_1, model::GgmlType::Q8_0, model::GgmlType::Q2_K, model::GgmlType::Q3_K,
    model::GgmlType::Q4_K, model::GgmlType::Q5_K, model::GgmlType::Q6_K, model::GgmlType::IQ4_NL,
    model::GgmlType::IQ4_XS, model::GgmlType::MXFP4};

struct CheckedCase {
  engine::OpCase c;
  engine::BufferId out;  // the buffer to compare
};

// Two row lengths per weight type: 2 blocks and a longer row; for f32/f16/bf16 one that is not a multiple of 4.
inline std::array<int64_t, 2> matmul_row_lengths(model::GgmlType type) {
  const int64_t block = model::traits(type).block_elems;
  return {block == 1 ? 13 : 2 * block, block == 1 ? 200 : (block == 32 ? 96 : 512)};
}

// y = W x for n tokens; rows = 37 + (n % 3) * 64 (37, 101 or 165: partial tiles, odd workgroup counts).
inline CheckedCase matmul_case(model::GgmlType type, int64_t n, int64_t cols, uint32_t& seed, int64_t rows = 0) {
  if (rows == 0) rows = 37 + (n % 3) * 64;
  engine::OpCase c(n, std::max<int64_t>(n, 8));
  const engine::BufferId in = c.input("x", n * cols, seed++);
  const engine::BufferId out = c.output("y", n * rows);
  const engine::WeightId w = c.weight("w", type, rows, cols, seed++);
  c.add("matmul", engine::MatMulOp{in, out, w, n, cols, rows});
  return {std::move(c), out};
}

// 9 random tokens (the last one the table's last row) looked up in a 57-row table, times `scale` (gemma3: sqrt(dim)).
inline CheckedCase embed_case(model::GgmlType type, uint32_t& seed, float scale = 1.f) {
  const int64_t block = model::traits(type).block_elems;
  const int64_t dim = block == 1 ? 19 : (block == 32 ? 96 : 256), vocab = 57, n = 9;
  engine::OpCase c(n, 16);
  const engine::WeightId table = c.weight("token_embd", type, vocab, dim, seed++);
  const engine::BufferId out = c.output("x", n * dim);
  std::mt19937 rng(seed++);
  for (auto& t : c.tokens) t = int32_t(rng() % uint32_t(vocab));
  c.tokens.back() = int32_t(vocab - 1);
  c.add("embed", engine::EmbedOp{table, c.plan.tokens, out, n, dim, scale});
  return {std::move(c), out};
}

// 5 rows of `width`, read from row `offset` on; in place when offset is 0.
inline CheckedCase rmsnorm_case(int64_t width, int64_t offset, uint32_t& seed) {
  const int64_t rows = 5;
  engine::OpCase c(1, 8);
  const engine::BufferId in = c.input("x", (rows + offset) * width, seed++, 3.f);
  const engine::WeightId w = c.weight("norm", model::GgmlType::F32, 1, width, seed++, 0.5f, 1.5f);
  const engine::BufferId out = offset == 0 ? in : c.output("y", rows * width);
  c.add("norm", engine::RmsNormOp{in, out, w, rows, width, offset, 1e-5f});
  return {std::move(c), out};
}

// 7 tokens x 3 heads at positions 3000.., rope base 5e5, freq_scale 0.5; partial: half the head rotated.
inline CheckedCase rope_case(model::RopePairing pairing, int64_t head_dim, bool partial, bool factors, uint32_t& seed) {
  const int64_t n = 7, heads = 3, rope_dims = partial ? head_dim / 2 : head_dim;
  engine::OpCase c(n, 4096);
  c.start_pos = 3000;
  const engine::BufferId x = c.input("q", n * heads * head_dim, seed++);
  const engine::WeightId ff =
      factors ? c.weight("rope_freqs", model::GgmlType::F32, 1, rope_dims / 2, seed++, 1.f, 8.f) : engine::kNoWeight;
  c.add("rope", engine::RopeOp{x, c.plan.positions, n, heads, head_dim, rope_dims, pairing, 500000.f, 0.5f, ff});
  return {std::move(c), x};
}

// The rope scaling of the YaRN cases: gpt-oss-like (freq_scale 1/32, ramp over pairs 5.3 .. 20.7) with attn_factor
// 0.9; without YaRN only attn_factor (0.8) scales.
inline void set_rope_scaling(engine::RopeOp& op, bool yarn) {
  if (yarn) {
    op.freq_scale = 1.f / 32.f;
    op.ext_factor = 1.f;
    op.attn_factor = 0.9f;
    op.yarn_low = 5.3f;
    op.yarn_high = 20.7f;
  } else {
    op.attn_factor = 0.8f;
  }
}

// rope_case's shape with rope scaling (set_rope_scaling).
inline CheckedCase rope_scaled_case(model::RopePairing pairing, int64_t head_dim, bool partial, bool yarn,
                                    uint32_t& seed) {
  CheckedCase r = rope_case(pairing, head_dim, partial, false, seed);
  set_rope_scaling(std::get<engine::RopeOp>(r.c.plan.ops.back().op), yarn);
  return r;
}

struct AttentionShape {
  int64_t n_tokens, start_pos, heads, kv_heads, head_dim;
  // Sequences sharing the step: n_tokens split among them (the first gets the remainder), sequence i starting at
  // start_pos + 37 * i (mod the context), on scrambled pages; 1: one sequence on pages 1, 2, ...
  int64_t n_seqs = 1;
  engine::ElemType kv_type = engine::ElemType::F32;
  int64_t padding = 0;  // padding tokens after the sequences' (at most n_tokens - n_seqs)
  int64_t window = 0;   // sliding window (AttentionOp::window); 0: none
  bool sinks = false;   // per-head sink logits in [-1, 3) (AttentionOp::sinks)
  bool decode = false;  // a batched decode step (AttentionOp::one_query_per_seq): n_tokens == n_seqs
};

struct AttentionCase {
  engine::OpCase c;
  engine::BufferId out, k_cache;
};

// This step's K and V written into a paged cache that holds random rows everywhere (as earlier steps left it; only
// each sequence's rows <= its position may be read), then causal attention of the step's queries over it.
inline AttentionCase attention_case(const AttentionShape& s, uint32_t& seed) {
  const int64_t ctx = 512, kv_width = s.kv_heads * s.head_dim;
  const bool multi = s.n_seqs > 1 || s.padding > 0;
  engine::OpCase c(s.n_tokens, ctx, multi ? s.n_seqs + 1 : 1);
  c.start_pos = s.start_pos;
  if (multi) {
    const int64_t real = s.n_tokens - s.padding;
    std::vector<int64_t> lens(size_t(s.n_seqs), real / s.n_seqs), starts;
    lens[0] += real % s.n_seqs;
    for (int64_t i = 0; i < s.n_seqs; ++i) starts.push_back(std::min((s.start_pos + 37 * i) % ctx, ctx - lens[size_t(i)]));
    c.sequences(lens, starts, seed++);
  }
  const int64_t rows = c.plan.shape.kv.cache_rows();
  const engine::BufferId q = c.input("q", s.n_tokens * s.heads * s.head_dim, seed++);
  const engine::BufferId k = c.input("k", s.n_tokens * kv_width, seed++);
  const engine::BufferId v = c.input("v", s.n_tokens * kv_width, seed++);
  const engine::BufferId k_cache = c.input("k_cache", rows * kv_width, seed++, 1.f, s.kv_type);
  const engine::BufferId v_cache = c.input("v_cache", rows * kv_width, seed++, 1.f, s.kv_type);
  const engine::BufferId out = c.output("attn", s.n_tokens * s.heads * s.head_dim);
  // Padding tokens all write the sink row 0 (in any order on a GPU) and read it back: give them identical rows, as
  // the engine's padding tokens are (token 0 at position 0), so the race writes equal values and results compare.
  for (engine::BufferId b : {q, k, v}) {
    std::vector<float>& x = c.inputs[b];
    const size_t row = x.size() / size_t(s.n_tokens), first = size_t(s.n_tokens - s.padding);
    for (size_t t = first + 1; t < size_t(s.n_tokens); ++t)
      std::copy_n(x.begin() + ptrdiff_t(first * row), row, x.begin() + ptrdiff_t(t * row));
  }
  const engine::KvLayout& kv = c.plan.shape.kv;
  c.add("k write", engine::KvWriteOp{k, k_cache, c.kv_rows, s.n_tokens, kv_width, rows});
  c.add("v write", engine::KvWriteOp{v, v_cache, c.kv_rows, s.n_tokens, kv_width, rows});
  c.add("attention", engine::AttentionOp{q, k_cache, v_cache, c.plan.positions, c.seq, c.page_table, out, s.n_tokens,
                                         s.heads, s.kv_heads, s.head_dim, s.head_dim, c.plan.shape.n_seqs,
                                         kv.page_size, kv.pages_per_seq, rows, 1.f / std::sqrt(float(s.head_dim))});
  auto& attn = std::get<engine::AttentionOp>(c.plan.ops.back().op);
  attn.window = s.window;
  attn.one_query_per_seq = s.decode;
  if (s.sinks) attn.sinks = c.weight("sinks", model::GgmlType::F32, 1, s.heads, seed++, -1.f, 3.f);
  return {std::move(c), out, k_cache};
}

struct ElementwiseCase {
  engine::OpCase c;
  engine::BufferId ffn, x;  // silu(gate) * up; x + ffn + bias
};

inline ElementwiseCase elementwise_case(int64_t rows, int64_t width) {
  engine::OpCase c(1, 8);
  const engine::BufferId gate = c.input("gate", rows * width, 700, 6.f);
  const engine::BufferId up = c.input("up", rows * width, 701);
  const engine::BufferId out = c.output("ffn", rows * width);
  const engine::BufferId x = c.input("x", rows * width, 702);
  const engine::WeightId bias = c.weight("bias", model::GgmlType::F32, 1, width, 703);
  c.add("swiglu", engine::GluOp{gate, up, out, rows * width});
  c.add("residual", engine::AddOp{x, out, rows * width});
  c.add("bias", engine::AddBiasOp{x, bias, rows, width});
  return {std::move(c), out, x};
}

// out = act(gate) * up for every GluKind: gate in [-9, 9) and up in [-9, 9) (SwiGluOai's limit 7 clamps both).
inline CheckedCase glu_case(engine::GluKind kind, int64_t rows, int64_t width, uint32_t& seed) {
  engine::OpCase c(1, 8);
  const engine::BufferId gate = c.input("gate", rows * width, seed++, 9.f);
  const engine::BufferId up = c.input("up", rows * width, seed++, 9.f);
  const engine::BufferId out = c.output("ffn", rows * width);
  engine::GluOp op{gate, up, out, rows * width, kind};
  c.add("glu", op);
  return {std::move(c), out};
}

// A mixture-of-experts FFN: router logits (an input) -> moe_route -> gate and up expert matmuls of x -> GLU over the
// [n, k, ffn] slots -> down expert matmul (per-slot input) -> moe_combine. `skew` adds 4 to expert 1's logits, so
// every token picks it first (an expert with more slots than a GEMM tile).
struct MoeShape {
  int64_t n_tokens, n_experts, k, dim, ffn;
  model::GgmlType type = model::GgmlType::Q8_0;
  engine::MoeGating gating = engine::MoeGating::SoftmaxTopK;
  bool normalize = true, bias = false, skew = false;
  engine::GluKind glu = engine::GluKind::SiLU;
};
struct MoeCase {
  engine::OpCase c;
  engine::BufferId experts, weights, gate, down, out;
};
inline MoeCase moe_case(const MoeShape& s, uint32_t& seed) {
  const int64_t n = s.n_tokens, k = s.k;
  engine::OpCase c(n, std::max<int64_t>(n, 8));
  const engine::BufferId x = c.input("x", n * s.dim, seed++);
  const engine::BufferId logits = c.input("router_logits", n * s.n_experts, seed++, 2.f);
  if (s.skew)
    for (int64_t t = 0; t < n; ++t) c.inputs[logits][size_t(t * s.n_experts + 1)] += 4.f;
  const engine::BufferId experts =
      c.plan.add_buffer("experts", engine::ElemType::I32, engine::BufferRole::Scratch, n * k);
  const engine::BufferId weights = c.output("expert_weights", n * k);
  const engine::BufferId gate = c.output("gate", n * k * s.ffn), up = c.output("up", n * k * s.ffn);
  const engine::BufferId down = c.output("down", n * k * s.dim), out = c.output("moe_out", n * s.dim);
  const engine::WeightId w_gate = c.weight("gate_exps", s.type, s.n_experts * s.ffn, s.dim, seed++);
  const engine::WeightId w_up = c.weight("up_exps", s.type, s.n_experts * s.ffn, s.dim, seed++);
  const engine::WeightId w_down = c.weight("down_exps", s.type, s.n_experts * s.dim, s.ffn, seed++);
  engine::WeightId b_gate = engine::kNoWeight, b_down = engine::kNoWeight;
  if (s.bias) {
    b_gate = c.weight("gate_exps_b", model::GgmlType::F32, s.n_experts, s.ffn, seed++);
    b_down = c.weight("down_exps_b", model::GgmlType::F32, s.n_experts, s.dim, seed++);
  }
  c.add("route", engine::MoeRouteOp{logits, experts, weights, n, s.n_experts, k, s.gating, s.normalize});
  c.add("gate", engine::MoeMatMulOp{x, experts, gate, w_gate, b_gate, n, k, s.dim, s.ffn, s.n_experts, false});
  c.add("up", engine::MoeMatMulOp{x, experts, up, w_up, engine::kNoWeight, n, k, s.dim, s.ffn, s.n_experts, false});
  c.add("glu", engine::GluOp{gate, up, gate, n * k * s.ffn, s.glu});
  c.add("down", engine::MoeMatMulOp{gate, experts, down, w_down, b_down, n, k, s.ffn, s.dim, s.n_experts, true});
  c.add("combine", engine::MoeCombineOp{down, weights, out, n, k, s.dim});
  return {std::move(c), experts, weights, gate, down, out};
}

// Decode-layer fragments that a backend may fuse (the Vulkan backend's decode fusions: src/vk/backend/fusion.h).

struct NormMatmulCase {
  engine::OpCase c;
  engine::BufferId q, k, extra;  // the two products; the extra reader's result (kNoBuffer without it)
};

// rmsnorm of n rows of x (read from row `offset` on, like the final norm of the last token), then two matmuls
// reading the normed rows (like attn_norm -> attn_q, attn_k; 37 and 21 rows). With `extra_reader`, an add also
// reads them (z += normed), so the norm's output is needed by more than the matmuls.
inline NormMatmulCase norm_matmul_case(model::GgmlType type, int64_t n, int64_t cols, int64_t offset,
                                       bool extra_reader, uint32_t& seed) {
  engine::OpCase c(n, 8);
  const engine::BufferId x = c.input("x", (n + offset) * cols, seed++, 3.f);
  const engine::WeightId norm = c.weight("attn_norm", model::GgmlType::F32, 1, cols, seed++, 0.5f, 1.5f);
  const engine::BufferId xb = c.output("xb", n * cols);
  const engine::BufferId q = c.output("q", n * 37), k = c.output("k", n * 21);
  const engine::WeightId wq = c.weight("wq", type, 37, cols, seed++), wk = c.weight("wk", type, 21, cols, seed++);
  c.add("attn_norm", engine::RmsNormOp{x, xb, norm, n, cols, offset, 1e-5f});
  c.add("attn_q", engine::MatMulOp{xb, q, wq, n, cols, 37});
  c.add("attn_k", engine::MatMulOp{xb, k, wk, n, cols, 21});
  engine::BufferId extra = engine::kNoBuffer;
  if (extra_reader) {
    extra = c.input("z", n * cols, seed++);
    c.add("extra", engine::AddOp{extra, xb, n * cols});
  }
  return {std::move(c), q, k, extra};
}

struct SwigluMatmulCase {
  engine::OpCase c;
  engine::BufferId x, h, extra;  // the residual stream after x += W_down h; h; the extra reader's result
};

// h = silu(gate) * up (in place over gate, like ffn_swiglu, unless `separate_out`), x += W_down h (ffn_down and the
// residual, 29 rows); with `extra_reader` an add also reads h. `kind` SwiGluOai: gpt-oss's clamped GLU instead, with a
// limit of 0.7 so that the clamps bind on both gate and up.
inline SwigluMatmulCase swiglu_matmul_case(model::GgmlType type, int64_t n, int64_t ffn, bool separate_out,
                                           bool extra_reader, uint32_t& seed,
                                           engine::GluKind kind = engine::GluKind::SiLU) {
  const int64_t dim = 29;
  engine::OpCase c(n, 8);
  const engine::BufferId gate = c.input("gate", n * ffn, seed++, 6.f);
  const engine::BufferId up = c.input("up", n * ffn, seed++);
  const engine::BufferId h = separate_out ? c.output("h", n * ffn) : gate;
  const engine::BufferId x = c.input("x", n * dim, seed++);
  const engine::BufferId product = c.output("ffn_out", n * dim);
  const engine::WeightId down = c.weight("w_down", type, dim, ffn, seed++);
  c.add("ffn_swiglu", engine::GluOp{gate, up, h, n * ffn, kind, 1.702f, 0.7f});
  c.add("ffn_down", engine::MatMulOp{h, product, down, n, ffn, dim});
  c.add("ffn_residual", engine::AddOp{x, product, n * dim});
  engine::BufferId extra = engine::kNoBuffer;
  if (extra_reader) {
    extra = c.input("z", n * ffn, seed++);
    c.add("extra", engine::AddOp{extra, h, n * ffn});
  }
  return {std::move(c), x, h, extra};
}

struct FfnCase {
  engine::OpCase c;
  engine::BufferId x, gate, up;  // the residual stream after the layer; the gate and up projections
};

// A llama FFN block of n tokens: xb = rmsnorm(x) * ffn_norm, gate = W_gate xb, up = W_up xb (ffn rows each),
// h = act(gate) * up in place over gate, x += W_down h (dim rows, in `down_type`). `kind` SwiGluOai: gpt-oss's
// clamped GLU with a limit of 0.7, so that the clamps bind.
inline FfnCase ffn_case(model::GgmlType type, model::GgmlType down_type, int64_t n, int64_t dim, int64_t ffn,
                        uint32_t& seed, engine::GluKind kind = engine::GluKind::SiLU) {
  engine::OpCase c(n, 8);
  const engine::BufferId x = c.input("x", n * dim, seed++, 3.f);
  const engine::WeightId norm = c.weight("ffn_norm", model::GgmlType::F32, 1, dim, seed++, 0.5f, 1.5f);
  const engine::BufferId xb = c.output("xb", n * dim);
  const engine::BufferId gate = c.output("gate", n * ffn), up = c.output("up", n * ffn);
  const engine::BufferId product = c.output("ffn_out", n * dim);
  const engine::WeightId w_gate = c.weight("w_gate", type, ffn, dim, seed++);
  const engine::WeightId w_up = c.weight("w_up", type, ffn, dim, seed++);
  const engine::WeightId w_down = c.weight("w_down", down_type, dim, ffn, seed++);
  c.add("ffn_norm", engine::RmsNormOp{x, xb, norm, n, dim, 0, 1e-5f});
  c.add("ffn_gate", engine::MatMulOp{xb, gate, w_gate, n, dim, ffn});
  c.add("ffn_up", engine::MatMulOp{xb, up, w_up, n, dim, ffn});
  c.add("ffn_swiglu", engine::GluOp{gate, up, gate, n * ffn, kind, 1.702f, 0.7f});
  c.add("ffn_down", engine::MatMulOp{gate, product, w_down, n, ffn, dim});
  c.add("ffn_residual", engine::AddOp{x, product, n * dim});
  return {std::move(c), x, gate, up};
}

struct ResidualNormCase {
  engine::OpCase c;
  engine::BufferId x, q, k;  // the residual stream after x += W_o a; the two projections of its rmsnorm
};

// A decode step's projection adding into the residual stream, then the next rmsnorm read by two matvecs (the next
// layer's Q and K): x += W_o a (W_o: dim x in, `type`), q = W_q rmsnorm(x), k = W_k rmsnorm(x) (rows x dim,
// `next_type`).
inline ResidualNormCase residual_norm_case(model::GgmlType type, model::GgmlType next_type, int64_t n, int64_t in,
                                          int64_t dim, int64_t rows, uint32_t& seed) {
  engine::OpCase c(n, 8);
  const engine::BufferId a = c.input("a", n * in, seed++);
  const engine::BufferId x = c.input("x", n * dim, seed++, 3.f);
  const engine::BufferId product = c.output("attn_out", n * dim), xb = c.output("xb", n * dim);
  const engine::BufferId q = c.output("q", n * rows), k = c.output("k", n * rows);
  const engine::WeightId w_o = c.weight("w_o", type, dim, in, seed++);
  const engine::WeightId norm = c.weight("ffn_norm", model::GgmlType::F32, 1, dim, seed++, 0.5f, 1.5f);
  const engine::WeightId w_q = c.weight("w_q", next_type, rows, dim, seed++);
  const engine::WeightId w_k = c.weight("w_k", next_type, rows, dim, seed++);
  c.add("attn_output", engine::MatMulOp{a, product, w_o, n, in, dim});
  c.add("attn_residual", engine::AddOp{x, product, n * dim});
  c.add("ffn_norm", engine::RmsNormOp{x, xb, norm, n, dim, 0, 1e-5f});
  c.add("q", engine::MatMulOp{xb, q, w_q, n, dim, rows});
  c.add("k", engine::MatMulOp{xb, k, w_k, n, dim, rows});
  return {std::move(c), x, q, k};
}

struct QkvRopeCase {
  engine::OpCase c;
  engine::BufferId q, k_cache, v_cache;
};

// A decode step's attention input: attn_norm, the Q, K and V projections (`type`, dim columns), then rope_q, rope_k
// and the K and V cache writes as rope_kv_case has them (6 query heads over 2 KV heads, positions 3000..; partial:
// half of each head rotated).
inline QkvRopeCase qkv_rope_case(model::GgmlType type, model::RopePairing pairing, int64_t n, int64_t dim,
                                 int64_t head_dim, bool partial, engine::ElemType kv_type, uint32_t& seed) {
  const int64_t heads = 6, kv_heads = 2, ctx = 3100, rope_dims = partial ? head_dim / 2 : head_dim;
  const int64_t kv_width = kv_heads * head_dim;
  engine::OpCase c(n, ctx);
  c.start_pos = 3000;
  const engine::BufferId x = c.input("x", n * dim, seed++, 3.f);
  const engine::WeightId norm = c.weight("attn_norm", model::GgmlType::F32, 1, dim, seed++, 0.5f, 1.5f);
  const engine::BufferId xb = c.output("xb", n * dim);
  const engine::BufferId q = c.output("q", n * heads * head_dim);
  const engine::BufferId k = c.output("k", n * kv_width), v = c.output("v", n * kv_width);
  const engine::WeightId wq = c.weight("wq", type, heads * head_dim, dim, seed++);
  const engine::WeightId wk = c.weight("wk", type, kv_width, dim, seed++);
  const engine::WeightId wv = c.weight("wv", type, kv_width, dim, seed++);
  const int64_t rows = c.plan.shape.kv.cache_rows();
  const engine::BufferId k_cache = c.input("k_cache", rows * kv_width, seed++, 1.f, kv_type);
  const engine::BufferId v_cache = c.input("v_cache", rows * kv_width, seed++, 1.f, kv_type);
  const auto pos = c.plan.positions;
  c.add("attn_norm", engine::RmsNormOp{x, xb, norm, n, dim, 0, 1e-5f});
  c.add("attn_q", engine::MatMulOp{xb, q, wq, n, dim, heads * head_dim});
  c.add("attn_k", engine::MatMulOp{xb, k, wk, n, dim, kv_width});
  c.add("attn_v", engine::MatMulOp{xb, v, wv, n, dim, kv_width});
  c.add("rope_q", engine::RopeOp{q, pos, n, heads, head_dim, rope_dims, pairing, 500000.f, 0.5f, engine::kNoWeight});
  c.add("rope_k", engine::RopeOp{k, pos, n, kv_heads, head_dim, rope_dims, pairing, 500000.f, 0.5f, engine::kNoWeight});
  c.add("k_cache", engine::KvWriteOp{k, k_cache, c.kv_rows, n, kv_width, rows});
  c.add("v_cache", engine::KvWriteOp{v, v_cache, c.kv_rows, n, kv_width, rows});
  return {std::move(c), q, k_cache, v_cache};
}

struct RopeKvCase {
  engine::OpCase c;
  engine::BufferId q, k, k_cache, v_cache;
};

// A decode step's rope_q, rope_k, k_cache and (with `v_write`) v_cache: n tokens at positions 3000.., 6 query heads
// over 2 KV heads, rope base 5e5, freq_scale 0.5; partial: half of each head rotated. The caches start random.
// With `scaled`, both ropes get set_rope_scaling(yarn = true); with `qk_norm`, the per-head RMSNorms of q and k
// (qwen3's attn_q_norm / attn_k_norm) come first.
inline RopeKvCase rope_kv_case(model::RopePairing pairing, int64_t n, int64_t head_dim, bool partial, bool factors,
                               bool v_write, uint32_t& seed, engine::ElemType kv_type = engine::ElemType::F32,
                               bool scaled = false, bool qk_norm = false) {
  const int64_t heads = 6, kv_heads = 2, ctx = 3100, rope_dims = partial ? head_dim / 2 : head_dim;
  const int64_t kv_width = kv_heads * head_dim;
  engine::OpCase c(n, ctx);
  c.start_pos = 3000;
  const engine::BufferId q = c.input("q", n * heads * head_dim, seed++);
  const engine::BufferId k = c.input("k", n * kv_width, seed++);
  const engine::BufferId v = c.input("v", n * kv_width, seed++);
  const int64_t rows = c.plan.shape.kv.cache_rows();
  const engine::BufferId k_cache = c.input("k_cache", rows * kv_width, seed++, 1.f, kv_type);
  const engine::BufferId v_cache = c.input("v_cache", rows * kv_width, seed++, 1.f, kv_type);
  const engine::WeightId ff =
      factors ? c.weight("rope_freqs", model::GgmlType::F32, 1, rope_dims / 2, seed++, 1.f, 8.f) : engine::kNoWeight;
  const auto pos = c.plan.positions;
  if (qk_norm) {
    const engine::WeightId qn = c.weight("q_norm", model::GgmlType::F32, 1, head_dim, seed++, 0.5f, 1.5f);
    const engine::WeightId kn = c.weight("k_norm", model::GgmlType::F32, 1, head_dim, seed++, 0.5f, 1.5f);
    c.add("attn_q_norm", engine::RmsNormOp{q, q, qn, n * heads, head_dim, 0, 1e-6f});
    c.add("attn_k_norm", engine::RmsNormOp{k, k, kn, n * kv_heads, head_dim, 0, 1e-5f});
  }
  c.add("rope_q", engine::RopeOp{q, pos, n, heads, head_dim, rope_dims, pairing, 500000.f, 0.5f, ff});
  c.add("rope_k", engine::RopeOp{k, pos, n, kv_heads, head_dim, rope_dims, pairing, 500000.f, 0.5f, ff});
  if (scaled)
    for (size_t i = c.plan.ops.size() - 2; i < c.plan.ops.size(); ++i)
      set_rope_scaling(std::get<engine::RopeOp>(c.plan.ops[i].op), true);
  c.add("k_cache", engine::KvWriteOp{k, k_cache, c.kv_rows, n, kv_width, rows});
  if (v_write) c.add("v_cache", engine::KvWriteOp{v, v_cache, c.kv_rows, n, kv_width, rows});
  return {std::move(c), q, k, k_cache, v_cache};
}

}  // namespace greta::test
