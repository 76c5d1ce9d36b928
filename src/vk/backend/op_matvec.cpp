// Decode matrix-vector products (y = W a for up to a few tokens, bandwidth-bound: every weight byte is read once per
// token): matvec_block_<type> for quantized rows whose length is a multiple of 32, matvec_<type> otherwise
// (f32/f16/bf16, odd lengths). encode_matmul sends its decode matmuls here; the backend's fusions (fusion.h) also
// send matmuls whose input the kernel makes itself (spec constant 3, INPUT):
//   IN_PLAIN    a = the op's input rows
//   IN_RMSNORM  a = rmsnorm(x) * norm weight: the kernel reads the un-normalized rows and takes their sum of squares
//               in the same pass as the dot products (no separate rmsnorm dispatch, no barrier before the matvec)
//   IN_SWIGLU   a = silu(gate) * up: read from the gate and up projections (no swiglu dispatch)
// Bindings: weights, x (the input, the norm's input or the gate), y, aux (norm weight or up; x again when unused:
// every declared binding must be bound).
//
// int8 activations (matvec_q8_<type>, on devices with integer dot products, VkBackendOptions::q8_activations): the
// input - plain, normalized or silu(gate) * up, as above - is first quantized to int8 per 32 elements by
// quantize_q8.comp (OpEncoder::q8_copy: once for all the matvecs of one input), and the matvec takes integer dot
// products of codes with codes. The results are those of the f32 kernel on the quantized input: within
// sum_blocks (max|a| / 254) * sum |w| of the exact product (what tests/vk/vk_ops_test.cpp checks), the way
// llama.cpp's own quantized dot products quantize activations to 8 bits.
#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

namespace {

// Up to this many tokens the matvec kernels (weights read once per group of up to 8 tokens) beat staging tiles: 8
// with the tiled GEMM (no cooperative matrices), 4 with the cooperative-matrix GEMM, whose 16-token tile with its K
// splits overtakes the matvecs between 4 and 8 tokens (docs/benchmarks.md, "op_matvec.cpp's rules").
constexpr int64_t kMatvecMaxTokens = 8, kMatvecMaxTokensCoopmat = 4;

enum : uint32_t { kInPlain = 0, kInRmsNorm = 1, kInSwiglu = 2, kInSwigluOai = 3 };  // matvec*.comp's INPUT

// matvec.comp's ROUTE variants (shaders.cmake): the router types that route in their last workgroup.
std::optional<ShaderId> route_shader(model::GgmlType type) {
  switch (type) {
    case model::GgmlType::F32: return ShaderId::matvec_route_f32;
    case model::GgmlType::F16: return ShaderId::matvec_route_f16;
    case model::GgmlType::BF16: return ShaderId::matvec_route_bf16;
    default: return std::nullopt;
  }
}

// Rows per workgroup of matvec_block when it takes several tokens (rows x tokens <= 16, the kernel's accumulators).
// Each token's activations are loaded once per slot for all of a workgroup's rows, so more rows share those loads,
// where the registers hold them and the grid keeps enough workgroups: 4 rows at 2 and 4 tokens only where that was
// measured to pay (Q4_0 from 4096 rows, Q4_K from 8192; not Q8_0 or Q6_K, whose four scales and runs per slot take
// 96 registers at 4 x 4) (docs/benchmarks.md, "op_matvec.cpp's rules").
uint32_t multi_token_rows(model::GgmlType type, int64_t rows, uint32_t tokens) {
  if (tokens > 4) return 2;
  if (type == model::GgmlType::Q4_0 && rows >= 4096) return 4;
  if (type == model::GgmlType::Q4_K && rows >= 8192) return 4;
  return 2;
}

// The int8 matvec's workgroup (invocations, rows) for 1 to 4 tokens on matrices of 1024 rows or more, if not the
// defaults: 64 invocations x 4 rows, which share every token's activations over 4 rows, for every type but Q8_0
// (slower), Q3_K (within noise), Q5_0 and Q5_1 (slower), Q4_1 at one token and Q6_K below 32768 rows at 1-2 tokens
// (mixed; at 4 tokens, since a row's slot is decoded once for all tokens (matvec_block.comp's mv_row), 64x4 wins).
// With 32-element slots (Q4_0, Q4_K, Q5_K, Q6_K: matvec_block.comp's MV_WIDE) a 4096-column row is 128 slots, two
// per invocation. Matrices of 1024-4095 rows (a GQA layer's K and V beside Q's 4096) lose on 64x4 run alone, but
// gain in the model: they then run Q's binary, whose instructions are in cache, where a binary of their own starts
// cold in every layer (docs/vulkan.md). Below 1024 rows the grid would be too small. Measured: docs/benchmarks.md,
// "op_matvec.cpp's rules".
std::optional<std::pair<uint32_t, uint32_t>> q8_matvec_shape(model::GgmlType type, int64_t rows, uint32_t tokens) {
  using model::GgmlType;
  if (tokens > 4 || rows < 1024) return std::nullopt;
  if (type == GgmlType::Q8_0 || type == GgmlType::Q3_K || type == GgmlType::Q5_0 || type == GgmlType::Q5_1)
    return std::nullopt;
  if ((type == GgmlType::Q6_K && rows < 32768 && tokens < 4) || (type == GgmlType::Q4_1 && tokens < 2))
    return std::nullopt;
  return std::pair<uint32_t, uint32_t>{64, 4};
}

// The types whose int8 matvec has 32-element slots (matvec_block.comp's MV_WIDE) take at most 4 tokens per
// workgroup: 8 hold 96 registers of activations, and two workgroups of 4 (the weights read twice) beat one of 8
// (docs/benchmarks.md, "op_matvec.cpp's rules"). With cooperative matrices the GEMM takes 5-8 tokens anyway.
uint32_t max_tokens_per_group(model::GgmlType type, bool q8) {
  using model::GgmlType;
  const bool wide =
      type == GgmlType::Q4_0 || type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
  return q8 && wide ? 4 : 8;
}

// A matvec dispatch's workgroup: invocations, rows and tokens (matvec_block's spec constants 0, 1 and 4).
struct MatvecLaunch {
  uint32_t local, rows, tokens;
};

// The workgroup of `op` on its kernel: `input` the kernel's INPUT (plain when the quantizer made it), `q8` and `block`
// which kernel family.
MatvecLaunch matvec_launch(const OpEncoder& e, model::GgmlType type, const engine::MatMulOp& op, uint32_t input, bool q8,
                           bool block) {
  // 2 rows per workgroup of 128: enough workgroups to fill a GPU even for 2048-row matrices (and, for the block-wise
  // kernel, the fastest of the 1..8 rows x 32..256 invocations measured on an H100: docs/benchmarks.md). With a
  // fused SwiGLU every workgroup evaluates silu over the whole row (one exp and one division per element), so it
  // takes 4 rows: half the workgroups, half that work.
  MatvecLaunch l{128, input >= kInSwiglu ? 4u : 2u, 1};
  const auto shape = forced_matvec_shape(e, "GRETA_VK_MATVEC");
  if (shape) std::tie(l.local, l.rows) = *shape;
  // Tokens per workgroup (matvec_block's TOKENS): each weight word read once for that many tokens of the step. The
  // largest power of two up to 8 (max_tokens_per_group) that divides the step (buckets are powers of two); fused f32
  // inputs (rmsnorm, swiglu) keep one token per workgroup.
  if ((q8 || block) && input == kInPlain)
    while (l.tokens < max_tokens_per_group(type, q8) && op.n_tokens % (2 * l.tokens) == 0) l.tokens *= 2;
  if (l.tokens > 1 && !shape) l.rows = multi_token_rows(type, op.out_features, l.tokens);
  if (const auto q8_shape = q8_matvec_shape(type, op.out_features, l.tokens); q8 && q8_shape && !shape)
    std::tie(l.local, l.rows) = *q8_shape;
  l.rows = std::max<uint32_t>(1, std::min({l.rows, 8u, 16 / l.tokens}));
  return l;
}

// The launch of a plain-input int8 matvec of `op` (a GLU pair's gate or up), if it runs on one.
std::optional<MatvecLaunch> q8_plain_launch(OpEncoder& e, const engine::MatMulOp& op) {
  const DeviceWeight& w = e.weight(op.weight);
  if (w.matrix.chunk_count() != 1 || !matvec_q8_input(e, MatmulArgs{.op = op})) return std::nullopt;
  return matvec_launch(e, w.type, op, kInPlain, true, has_weight_shader(WeightKernel::matvec_block, w.type));
}

}  // namespace

std::optional<std::pair<uint32_t, uint32_t>> forced_matvec_shape(const OpEncoder& e, const char* variable) {
  const DeviceInfo& info = e.info();
  const char* v = e.switches().get(variable);
  if (!v) return std::nullopt;
  unsigned wg = 0, rows = 0;
  if (std::sscanf(v, "%ux%u", &wg, &rows) != 2 || wg % info.subgroup_size != 0 || wg > 1024 || rows < 1 || rows > 8)
    fail(variable, "=", v, ": expected WGxROWS, WG a multiple of the subgroup size (<= 1024), ROWS 1..8");
  return std::pair<uint32_t, uint32_t>{wg, rows};
}

bool matmul_uses_matvec(MatmulKernel kernel, const engine::MatMulOp& op, bool coopmat_gemm) {
  if (kernel == MatmulKernel::matvec || op.in_features % 4 != 0) return true;  // the GEMMs need rows of whole vec4
  return kernel == MatmulKernel::automatic &&
         op.n_tokens <= (coopmat_gemm ? kMatvecMaxTokensCoopmat : kMatvecMaxTokens);
}

std::optional<Q8Source> matvec_q8_input(OpEncoder& e, const MatmulArgs& args) {
  const engine::MatMulOp& op = args.op;
  const DeviceWeight& w = e.weight(op.weight);
  if (!e.q8_matvec() || !has_weight_shader(WeightKernel::matvec_q8, w.type) || op.in_features % 32 != 0)
    return std::nullopt;
  Q8Source src{.x = op.in, .rows = op.n_tokens, .cols = op.in_features};
  if (args.norm) {
    src.input = kInRmsNorm, src.x = args.norm->in, src.norm = args.norm->weight;
    src.x_row0 = args.norm->in_row_offset, src.eps = args.norm->eps;
  } else if (args.swiglu) {
    src.input = fused_glu_input(*args.swiglu), src.x = args.swiglu->gate, src.up = args.swiglu->up;
    src.alpha = args.swiglu->alpha, src.limit = args.swiglu->limit;
  }
  return src;
}

bool glu_pair_usable(OpEncoder& e, const GluPair& pair) {
  const engine::MatMulOp &gate = pair.gate, &up = pair.up, &down = pair.down;
  const engine::GluOp& glu = pair.glu;
  const int64_t rows = gate.out_features, n = gate.n_tokens;
  if ((glu.kind != engine::GluKind::SiLU && glu.kind != engine::GluKind::SwiGluOai) || glu.gate != gate.out ||
      glu.up != up.out || glu.out != down.in || glu.elems != n * rows || up.out_features != rows || up.n_tokens != n ||
      down.n_tokens != n || down.in_features != rows || rows % 32 != 0 || n != 1 || gate.out == up.out)
    return false;
  if (!matvec_q8_input(e, MatmulArgs{.op = down, .swiglu = glu})) return false;
  const std::optional<MatvecLaunch> g = q8_plain_launch(e, gate), u = q8_plain_launch(e, up);
  // glu_out_block: 8 invocations per block, a row group's rows within one block of 32.
  return g && u && 32 % g->rows == 0 && 32 % u->rows == 0 && g->local >= 8 && u->local >= 8;
}

bool norm_out_usable(OpEncoder& e, const MatmulArgs& args) {
  const engine::MatMulOp& op = args.op;
  // One-token steps only: at 4 tokens the counting and the finishing workgroups' chain of round trips cost the
  // projections more than the quantizer stage they replace, as a variant of its own (8B on the H200: -2 %) and as a
  // push constant on the projections' shared binary (-1.7 %, the 7B -2.6 %; docs/benchmarks.md).
  if (!args.norm_out || !args.accumulate || args.bias || args.route || args.glu_pair || op.n_tokens != 1) return false;
  const Q8Source& next = *args.norm_out;
  if (next.input != 1 || next.x != op.out || next.x_row0 != 0 || next.rows != op.n_tokens ||
      next.cols != op.out_features || op.out_features % 32 != 0 || !matvec_q8_input(e, args))
    return false;
  const DeviceWeight& w = e.weight(op.weight);
  const std::optional<MatvecLaunch> l = q8_plain_launch(e, op);
  // norm_out_block: 8 invocations per token of the block, a row group's rows within one block of 32.
  return l && w.matrix.chunk_count() == 1 && 32 % l->rows == 0 && l->local >= 8 * l->tokens &&
         op.n_tokens % l->tokens == 0 && e.weight(next.norm).cols == op.out_features;
}

bool rope_out_usable(OpEncoder& e, const MatmulArgs& args) {
  const engine::MatMulOp& op = args.op;
  // Steps of 1-4 tokens (docs/benchmarks.md).
  if (!args.rope_out || !args.norm || args.accumulate || args.bias || args.route || args.glu_pair || args.norm_out ||
      op.n_tokens > 4)
    return false;
  const RopeKvArgs& a = args.rope_out->rope_kv;
  const uint32_t part = args.rope_out->part;
  const engine::RopeOp& rope = part == 1 ? a.q : a.k;
  if (a.q_norm || !a.v_write || rope.pairing != model::RopePairing::Adjacent || rope.head_dim % 2 != 0 ||
      rope.rope_dims % 2 != 0 || rope.n_tokens != op.n_tokens)
    return false;
  const bool fits = part == 1   ? op.out == a.q.x && op.out_features == a.q.n_heads * a.q.head_dim
                    : part == 2 ? op.out == a.k.x && op.out_features == a.k_write.width
                    : part == 3 ? op.out == a.v_write->src && op.out_features == a.v_write->width
                                : false;
  const engine::BufferId cache = part == 3 ? a.v_write->cache : a.k_write.cache;
  const engine::ElemType type = e.cache_type(cache);
  if (!fits || (type != engine::ElemType::F32 && type != engine::ElemType::F16) || !matvec_q8_input(e, args) ||
      !has_weight_shader(WeightKernel::matvec_block, e.weight(op.weight).type))
    return false;
  const std::optional<MatvecLaunch> l = q8_plain_launch(e, op);
  return l && l->rows % 2 == 0 && e.weight(op.weight).matrix.chunk_count() == 1;
}

void encode_matvec(OpEncoder& e, const MatmulArgs& args) {
  const engine::MatMulOp& op = args.op;
  const DeviceWeight& w = e.weight(op.weight);
  GRETA_CHECK(w.cols == op.in_features && w.rows == op.out_features && w.rows > 1, w.name);
  GRETA_CHECK(!(args.norm && args.swiglu), "matvec with two fused inputs");
  to_u32(op.n_tokens * std::max(op.in_features, op.out_features), "activation elements");

  uint32_t input = kInPlain, x_row0 = 0;
  float eps = 0.f;
  BufferSpan x = e.buffer(op.in), aux = x;
  if (args.norm) {
    const engine::RmsNormOp& n = *args.norm;
    const DeviceWeight& nw = e.weight(n.weight);
    GRETA_CHECK(nw.rows == 1 && nw.cols == op.in_features && n.width == op.in_features && n.rows == op.n_tokens &&
                    n.out == op.in,
                nw.name);
    input = kInRmsNorm;
    x = e.buffer(n.in);
    aux = nw.vector.span();
    x_row0 = to_u32(n.in_row_offset, "row offset");
    eps = n.eps;
  } else if (args.swiglu) {
    const engine::GluOp& s = *args.swiglu;
    GRETA_CHECK(s.out == op.in && s.elems == op.n_tokens * op.in_features, "swiglu fused into ", w.name);
    input = fused_glu_input(s);
    x = e.buffer(s.gate);
    aux = e.buffer(s.up);
  }

  const uint32_t fused_input = input;
  const std::optional<Q8Source> q8_src = matvec_q8_input(e, args);
  const bool q8 = q8_src.has_value();
  const bool block = has_weight_shader(WeightKernel::matvec_block, w.type) && op.in_features % 32 == 0;
  // A router with its route: in the matvec's last workgroup where the weight is a float matrix in one buffer (ROUTE),
  // else as its own dispatch after this one.
  const engine::MoeRouteOp* route = args.route ? &*args.route : nullptr;
  if (route) {
    check_moe_route(e, *route);
    GRETA_CHECK(route->logits == op.out && route->n_experts == op.out_features && route->n_tokens == op.n_tokens &&
                    !args.accumulate,
                "route fused into ", w.name);
  }
  const std::optional<ShaderId> route_id = route_shader(w.type);
  const bool route_inside = route && !q8 && !block && route_id && w.matrix.chunk_count() == 1;
  const ShaderId id = route_inside ? *route_id
                                   : weight_shader(q8      ? WeightKernel::matvec_q8
                                                   : block ? WeightKernel::matvec_block
                                                           : WeightKernel::matvec,
                                                   w.type);
  e.note_variant(shader_blob(id).name);  // first, before the quantizer's name
  if (q8) {
    if (e.q8_pair_holds(*q8_src)) e.note_variant("input (int8, made by the gate and up projections)");
    if (e.q8_norm_holds(*q8_src)) e.note_variant("input (int8, made by the projection before)");
    x = aux = e.q8_copy(*q8_src);
    input = kInPlain, x_row0 = 0;  // the quantizer made the input: the matvec reads its rows 0 .. n_tokens
  }
  const auto [local, rows_per_group, tokens_per_group] = matvec_launch(e, w.type, op, input, q8, block);
  const BufferSpan out = e.buffer(op.out);
  BufferSpan bias = out;  // a stand-in binding when there is no bias (BIAS off: never read)
  if (args.bias) {
    const DeviceWeight& b = e.weight(*args.bias);
    GRETA_CHECK(b.rows == 1 && b.cols == op.out_features, b.name, ": bias of ", b.cols, " for ", op.out_features, " rows");
    bias = b.vector.span();
  }
  // The int8 kernel takes the residual add as a push constant (matvec_block.comp's MV_ACCUMULATE).
  std::vector<SpecConstant> spec = {{0, local}, {1, rows_per_group}, {2, args.accumulate && !q8}, {3, input},
                                    {5, args.bias.has_value()}};
  if (q8 || block) spec.push_back({4, tokens_per_group});
  if (input == kInSwigluOai) append_glu_constants(spec, *args.swiglu);
  // The gate or up projection of a pair that makes the down projection's int8 input (GLU_OUT); stand-ins otherwise
  // (every binding the int8 kernel declares is bound).
  BufferSpan pair_out = out, counters = out, glu_q8 = out;
  const GluPair* pair = q8 && args.glu_pair && glu_pair_usable(e, *args.glu_pair) ? &*args.glu_pair : nullptr;
  if (pair) {
    const std::optional<Q8Source> down_src = matvec_q8_input(e, MatmulArgs{.op = pair->down, .swiglu = pair->glu});
    GRETA_CHECK(down_src.has_value(), w.name, ": the down projection of a GLU pair takes no int8 input");
    const OpEncoder::Q8PairTarget target = e.q8_pair_target(*down_src);
    pair_out = e.buffer(pair->is_up ? pair->gate.out : pair->up.out);
    counters = target.counters, glu_q8 = target.q8;
    const uint32_t row_groups_per_block =
        32 / q8_plain_launch(e, pair->gate)->rows + 32 / q8_plain_launch(e, pair->up)->rows;
    spec.insert(spec.end(), {{8, fused_glu_input(pair->glu)}, {9, pair->is_up ? 1u : 0u}, {10, row_groups_per_block}});
    if (pair->glu.kind == engine::GluKind::SwiGluOai) append_glu_constants(spec, pair->glu);
    e.note_variant("makes the down projection's int8 input (the GLU of gate and up; the last workgroup of a block)");
  }
  // The projection adding into the stream that also makes the next rmsnorm's int8 rows (NORM_OUT): the norm weight
  // in aux, the counters and partial sums in the counters binding, the rows where the next matvecs' q8_copy finds them.
  uint32_t norm_out = 0;
  if (q8 && norm_out_usable(e, args)) {
    const Q8Source& next = *args.norm_out;
    const OpEncoder::Q8PairTarget target = e.q8_norm_target(next);
    aux = e.weight(next.norm).vector.span();
    counters = target.counters, glu_q8 = target.q8;
    eps = next.eps, norm_out = 1;
    e.note_variant("makes the next rmsnorm's int8 input (its last workgroup)");
  }
  // Q, K or V doing its part of the rope_kv after it (ROPE_OUT): positions, frequencies, cache rows and the cache
  // bound at 8..11 (stand-ins otherwise). The backend drops the rope_kv dispatch once it has set rope_out on all
  // three (rope_kv_parts asked rope_out_usable), so a part not done here would be lost: no silent fallback.
  std::array<BufferSpan, 4> rope_spans{out, out, out, out};
  uint32_t head_dim = 0, rope_dims = 0, rope_part = 0, cache_f16 = 0;
  if (args.rope_out) {
    GRETA_CHECK(q8 && rope_out_usable(e, args), w.name, ": rope_kv's part set on a matvec that cannot do it");
    const RopeKvArgs& a = args.rope_out->rope_kv;
    const uint32_t part = args.rope_out->part;
    const engine::RopeOp& rope = part == 1 ? a.q : a.k;
    const engine::KvWriteOp& write = part == 3 ? *a.v_write : a.k_write;
    rope_spans = {e.buffer(rope.positions), rope_inv_freq(e, rope), e.buffer(write.rows), e.buffer(write.cache)};
    head_dim = to_u32(rope.head_dim, "head dim"), rope_dims = to_u32(rope.rope_dims, "rope dims");
    rope_part = part, cache_f16 = e.cache_type(write.cache) == engine::ElemType::F16 ? 1u : 0u;
    e.note_variant(part == 1   ? "rotates q (rope_kv's part)"
                   : part == 2 ? "rotates k and appends it to the cache (rope_kv's part)"
                               : "appends v to the cache (rope_kv's part)");
  }
  if (route_inside) spec.push_back({8, route->gating == engine::MoeGating::SoftmaxTopK ? 0u : 1u});
  const auto& p = e.pipeline(id, spec);
  for (size_t c = 0; c < w.matrix.chunk_count(); ++c) {
    const struct {
      uint32_t row_bytes, rows, cols, out_row0, out_stride, x_row0;
      float eps;
      uint32_t tail0, tail1;  // ROUTE: k, normalize; the int8 kernel: head_dim, rope_dims (ROPE_OUT); else none
      uint32_t rope_part, cache_f16, accumulate, norm_out;  // the int8 kernel only (ROPE_OUT, the residual add, NORM_OUT)
    } push{to_u32(int64_t(w.row_bytes), "row bytes"),
           to_u32(w.chunk_rows(c), "rows"),
           to_u32(op.in_features, "in features"),
           to_u32(w.chunk_first_row(c), "row"),
           to_u32(op.out_features, "out features"),
           x_row0,
           eps,
           route ? to_u32(route->k, "k") : head_dim,
           route ? (route->normalize ? 1u : 0u) : rope_dims,
           rope_part,
           cache_f16,
           q8 && args.accumulate ? 1u : 0u,
           norm_out};
    const auto bytes = as_push(push);
    const uint32_t row_groups = (push.rows + rows_per_group - 1) / rows_per_group;
    const std::array<uint32_t, 3> groups{std::min(row_groups, e.info().max_workgroup_count[0]),
                                         to_u32(op.n_tokens, "tokens") / tokens_per_group, 1};
    if (route_inside)
      e.dispatch(p, {w.matrix.chunk(c).span(), x, out, aux, bias, e.buffer(route->experts), e.buffer(route->weights),
                     e.zeroed_buffer(4, "route counter")},
                 bytes.first(bytes.size() - 16), groups);
    else if (q8)
      e.dispatch(p, {w.matrix.chunk(c).span(), x, out, aux, bias, pair_out, counters, glu_q8, rope_spans[0],
                     rope_spans[1], rope_spans[2], rope_spans[3]},
                 bytes, groups);
    else
      e.dispatch(p, {w.matrix.chunk(c).span(), x, out, aux, bias}, bytes.first(bytes.size() - 24), groups);
  }
  if (route_inside) e.note_variant(cat("fused route (", moe_route_note(*route), ")"));
  if (route && !route_inside) {
    e.barrier();
    encode_moe_route(e, *route);
  }
  if (args.bias) e.note_variant("fused bias");
  if (tokens_per_group > 1) e.note_variant(cat(tokens_per_group, " tokens x ", rows_per_group, " rows per workgroup"));
  if (args.accumulate) e.note_variant("fused residual add (y += W x)");
  if (fused_input == kInRmsNorm) e.note_variant("fused rmsnorm input");
  if (fused_input == kInSwiglu) e.note_variant("fused swiglu input");
  if (fused_input == kInSwigluOai) e.note_variant("fused clamped swiglu input");
}

}  // namespace greta::vk
