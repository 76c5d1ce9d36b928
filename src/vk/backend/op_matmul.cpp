// Matrix products with a weight of any type, dequantized inside the kernels:
//   decode (few tokens) or rows whose length is not a multiple of 4:  matvec      (bandwidth-bound; quantized
//                                                                     types: matvec_block)
//   prefill, device with 16x16x16 f16 cooperative matrices:           matmul_coopmat (not for F32 weights)
//   prefill otherwise:                                                 matmul_tiled
// The GEMMs' tiles come from, in order: a forced config (greta-vk tune's candidates), the switches
// GRETA_VK_COOPMAT_TILE / GRETA_VK_TILED_TILE (experiment_switches.h), the tuning cache (tuning.h: greta-vk tune's
// winners for this device and shape class), the built-in default.
// A weight split over several buffers gets one dispatch per chunk; each writes its rows of the output.
// With `accumulate`, every kernel adds its product to what `out` holds (y += W x): the backend fuses a residual add
// that consumes the product into the matmul that makes it.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

namespace {

// One shared-memory stage of matmul_coopmat: X and W rows as uvec4 with a padded stride of bk / 8 + 1.
uint64_t coopmat_stage_bytes(const MatmulTile& t) { return uint64_t(t.bm + t.bn) * (t.bk / 8 + 1) * 16; }

// matmul_coopmat.comp's limits: at most 4 x 4 fragments per subgroup, BK a multiple of 16 per K group, and at most 4
// staged uvec4 (8 halves each) of X and of W per invocation and K step; one of its shared-memory stages must fit the
// device (two run where they fit: coopmat_stages).
bool coopmat_tile_valid(const MatmulTile& t, const DeviceInfo& info) {
  if (t.wm == 0 || t.wn == 0 || t.bk == 0 || t.kg == 0 || t.kg > 4) return false;
  const uint64_t threads = uint64_t(t.kg) * t.wm * t.wn * info.subgroup_size;
  // The stages; the edge tiles (1 KiB per subgroup of K group 0) and the K groups' sum (one fragment row of groups
  // 1..kg-1: 1 KiB per fragment) alias them.
  const uint64_t fn = t.bn / t.wn / 16;
  const uint64_t stages_bytes = coopmat_stages(t, info) * coopmat_stage_bytes(t);
  const uint64_t shared_bytes =
      std::max({stages_bytes, uint64_t(t.wm) * t.wn * 1024, uint64_t(t.kg - 1) * t.wm * t.wn * fn * 1024});
  if (threads > info.max_workgroup_invocations || threads > info.max_workgroup_size[0] ||
      shared_bytes > info.max_shared_memory)
    return false;
  return t.bm % (16 * t.wm) == 0 && t.bn % (16 * t.wn) == 0 && t.bm / t.wm <= 64 && t.bn / t.wn <= 64 &&
         t.bk % (16 * t.kg) == 0 && uint64_t(t.bm) * t.bk / 8 <= 4 * threads &&
         uint64_t(t.bn) * t.bk / 8 <= 4 * threads;
}

// matmul_tiled.comp's: each invocation owns a 4 x 4 block of the BM x BN tile (workgroup BM/4 * BN/4), K steps of
// whole vec4 (BK % 4 == 0), X[BM, BK] and W[BN, BK] staged as f32 in shared memory.
bool tiled_tile_valid(const MatmulTile& t, const DeviceInfo& info) {
  if (t.wm != 0 || t.wn != 0 || t.bm == 0 || t.bn == 0 || t.bk == 0) return false;
  if (t.bm % 4 != 0 || t.bn % 4 != 0 || t.bk % 4 != 0) return false;
  const uint64_t threads = uint64_t(t.bm / 4) * (t.bn / 4);
  const uint64_t shared_bytes = uint64_t(t.bm + t.bn) * t.bk * 4;
  return threads <= info.max_workgroup_invocations && threads <= info.max_workgroup_size[0] &&
         shared_bytes <= info.max_shared_memory;
}

// GRETA_VK_COOPMAT_TILE=BMxBNxWMxWN[xBK] / GRETA_VK_TILED_TILE=BMxBNxBK: a tile for every prefill matmul on that
// kernel (measurements); nullopt when unset. A tile the device cannot run is an error, not a silent fallback.
std::optional<MatmulTile> forced_tile(GemmKernel kernel, const OpEncoder& e) {
  const DeviceInfo& info = e.info();
  const char* var = kernel == GemmKernel::coopmat ? "GRETA_VK_COOPMAT_TILE" : "GRETA_VK_TILED_TILE";
  const char* v = e.switches().get(var);
  if (!v) return std::nullopt;
  const auto tile = parse_tile(kernel, v);
  if (tile && matmul_tile_valid(kernel, *tile, info)) return tile;
  if (kernel == GemmKernel::tiled)
    fail(var, "=", v, ": expected BMxBNxBK with BM, BN and BK multiples of 4, (BM/4)*(BN/4) invocations within the ",
         "device's workgroup limit and (BM+BN)*BK*4 bytes within its shared memory");
  fail(var, "=", v, ": expected BMxBNxWMxWN[xBK[xKG]] with BM a multiple of 16*WM, BN of 16*WN, at most 4 ",
       "fragments of 16 per subgroup each way, BK a multiple of 16*KG, KG 1..4, and BM*BK/8, BN*BK/8 <= ",
       "4*KG*WM*WN*", info.subgroup_size, ", within the device's workgroup and shared-memory limits");
}

// The tile of one prefill matmul, and where it came from (shown by describe_kernels / GRETA_VK_LOG_KERNELS).
struct ChosenTile {
  MatmulTile tile;
  const char* source;
};

ChosenTile choose_tile(const OpEncoder& e, GemmKernel kernel, model::GgmlType type, const engine::MatMulOp& op) {
  const MatmulTuning& tuning = e.matmul_tuning();
  if (tuning.forced) {
    if (!matmul_tile_valid(kernel, tuning.forced->tile, e.info()))
      fail("vk: the ", gemm_kernel_name(kernel), " matmul tile ", tile_name(kernel, tuning.forced->tile),
           " is not valid on ", e.info().name);
    return {tuning.forced->tile, "forced"};
  }
  if (const auto env = forced_tile(kernel, e)) return {*env, "env"};
  if (tuning.tuned) {
    const MatmulShapeClass shape{kernel, type, token_bucket(op.n_tokens), op.out_features, op.in_features};
    if (const auto it = tuning.tuned->find(shape); it != tuning.tuned->end()) return {it->second.tile, "tuned"};
  }
  // A small step's tile where this device can run it (not every subgroup size and shared-memory size can).
  const MatmulTile small = default_tile(kernel, op.n_tokens);
  return {matmul_tile_valid(kernel, small, e.info()) ? small : default_tile(kernel), "default"};
}

struct MatmulPush {
  uint32_t row_bytes, rows, cols, out_row0, out_stride, n_tokens;
};

// GRETA_VK_GEMM_X16=0 keeps the f16 GEMM's f32 input (measurements).
bool gemm_f16_activations(const ExperimentSwitches& switches) {
  const char* v = switches.get("GRETA_VK_GEMM_X16");
  return !(v && std::string_view(v) == "0");
}

// matmul_coopmat's split-K factor for a grid of `groups` workgroups over `k_steps` K steps. Prefill: doubled (up to
// 4) while the grid has fewer than 128 workgroups (the H100's 132 SMs at one workgroup each), keeping at least 16 K
// steps per split; larger grids gain or lose with the wave count. A GEMM recorded after other dispatches without a
// barrier between them (K and V after Q) shares the device with them: at most 2 splits, by the same rule (the 8B's
// K and V, 32 workgroups each, whose workgroups otherwise walk all of K in a second wave behind Q's 128), its sum in
// the stage after them with the others' (flush_split_sums). Steps of at most 64 tokens (batched decode: one token per
// sequence) split every GEMM, alone or not, 4 ways up to 32 tokens, else 2 (then widen_batched_split), keeping at
// least 8 K steps per split: their tiles cover the whole step, so a workgroup walks all of K for a few tokens, bound
// by its staging loop (load, dequantize, barrier) rather than by the weight bytes; the split GEMMs of a stage run
// side by side with their sums in one stage after them (flush_split_sums), so more splits stop paying early. The
// measurements: docs/benchmarks.md, "op_matmul.cpp's rules".
// GRETA_VK_GEMM_SPLIT=N forces N (1..16) on both GEMM kernels for measurements and tests.
std::optional<uint32_t> forced_split(uint32_t k_steps, const ExperimentSwitches& switches) {
  const char* v = switches.get("GRETA_VK_GEMM_SPLIT");
  if (!v) return std::nullopt;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 16) fail("GRETA_VK_GEMM_SPLIT=", v, ": expected 1..16");
  return std::min(uint32_t(n), k_steps);
}

constexpr uint32_t kBatchedSplitMinSteps = 8;  // K steps each split of a batched step's GEMM keeps at least

}  // namespace

// Steps of 33-64 tokens: their tiles hold all of the step's tokens (the int8 GEMM's 64 x 64, whose registers and 48
// KiB of shared memory leave two workgroups per SM on the H200), so a GEMM of few row tiles fills a fraction of a
// wave whose workgroups each walk k_steps / split K steps. Its split grows from the rule's while the grid stays within
// one wave of two workgroups per compute unit (128 units where the device reports none) and each split keeps
// kBatchedSplitMinSteps: Q, K, V, the output projection and a 4096-row down projection get shorter chains, while
// gate, up and the output matrix, whose grids already fill the wave, keep theirs (more partials for their readers
// to add cost more than they bought). The minimum is in K steps, not columns: Q4_K's steps of 256 keep 2048 columns
// (4 splits of 1024 for the 8B's Q, K, V and attn_output lost 2 %). Measured: docs/benchmarks.md, "op_matmul.cpp's
// rules".
uint32_t widen_batched_split(uint32_t split, uint64_t groups, uint32_t k_steps, const DeviceInfo& info) {
  const uint64_t wave = 2ull * (info.compute_units ? info.compute_units : 128u);
  while (groups * (split + 1) <= wave && k_steps / (split + 1) >= kBatchedSplitMinSteps) ++split;
  return split;
}

uint32_t coopmat_split(uint64_t groups, uint32_t k_steps, bool alone, int64_t n_tokens, const DeviceInfo& info,
                       const ExperimentSwitches& switches) {
  if (const auto forced = forced_split(k_steps, switches)) return *forced;
  const bool batched = n_tokens <= 64;
  uint32_t split = batched ? (n_tokens <= 32 ? 4 : 2) : 1;
  while (!batched && split < (alone ? 4u : 2u) && groups * split < 128) split *= 2;
  const uint32_t min_steps = batched ? kBatchedSplitMinSteps : 16;
  while (split > 1 && k_steps / split < min_steps) split /= 2;
  if (batched && n_tokens > 32) split = widen_batched_split(split, groups, k_steps, info);
  return split;
}

namespace {

// matmul_tiled's split-K factor: each invocation owns a 4 x 4 block of C, so the grid is C's elements / 16
// invocations whatever the tile, and a narrow C (a MoE router's 128 rows) leaves a GPU nearly idle. Doubled (up to
// 32) while the grid has fewer than 256 workgroups and each split keeps at least 8 K steps; only when alone, as
// coopmat_split.
uint32_t tiled_split(uint64_t groups, uint32_t k_steps, bool alone, const ExperimentSwitches& switches) {
  if (const auto forced = forced_split(k_steps, switches)) return *forced;
  uint32_t split = 1;
  while (alone && split < 32 && groups * split < 256 && k_steps / (2 * split) >= 8) split *= 2;
  return split;
}

// Partial products of a split-K GEMM (matmul_coopmat.comp, matmul_tiled.comp): splits 1.. each write an M x N block
// at a stride of M * N rounded up to 64 floats (the shaders' partial_stride()); split 0 writes y.
struct SplitK {
  uint32_t split = 1;
  uint64_t elems = 0, stride = 0;
  BufferSpan partials{};  // y itself when split == 1 (never written)
};

SplitK split_k(OpEncoder& e, uint32_t split, const MatmulPush& push, BufferSpan out) {
  SplitK s;
  s.split = split;
  s.elems = uint64_t(push.n_tokens) * push.rows;
  s.stride = (s.elems + 63) / 64 * 64;
  s.partials = out;
  if (split > 1) s.partials = e.gemm_partials((split - 1) * s.stride * 4);  // this GEMM's own region
  return s;
}

// y += the partials, in split order (add_splits.comp): queued, recorded at the stage's end or added by y's reader
// (flush_split_sums). `id`: the plan buffer `out` spans.
void add_partials(OpEncoder& e, const SplitK& s, engine::BufferId id, BufferSpan out) {
  if (s.split > 1) e.add_split_sum(id, out, s.partials, s.split - 1, s.elems, s.stride);
}

// matmul_coopmat's DEPTH: the K steps between a staging load's issue and its use, as far ahead as the raw words fit
// in registers and help. With one shared-memory stage (the default tile), a K step of 64 hides a load: 1, but 2 for
// F16. With two stages: 3 for Q4_0 on tiles with K groups (512 invocations, at most 128 registers each: Q4_0 takes
// 126), where Q4_K and Q6_K reach 128 and lose; else 2. Measured: docs/benchmarks.md, "op_matmul.cpp's rules".
// GRETA_VK_GEMM_DEPTH=1|2|3 forces it for comparisons.
uint32_t coopmat_load_depth(model::GgmlType type, const MatmulTile& tile, uint32_t stages,
                            const ExperimentSwitches& switches) {
  const char* v = switches.get("GRETA_VK_GEMM_DEPTH");
  if (!v && stages == 1) return type == model::GgmlType::F16 ? 2 : 1;
  if (!v) return type == model::GgmlType::Q4_0 && tile.kg > 1 ? 3 : 2;
  const std::string_view s(v);
  if (s != "1" && s != "2" && s != "3") fail("GRETA_VK_GEMM_DEPTH=", s, ": expected 1, 2 or 3");
  return uint32_t(s[0] - '0');
}

// matmul_coopmat_q8 (int8 cooperative matrices on int8 activations) for a batched step's GEMM of Q4_0, Q4_K or Q6_K
// weights: the f16 GEMM at 16-64 tokens is bound by staging each weight as f16, which this kernel does not do.
// Needs 16x16x32 s8 and 16x16x16 f16 subgroup cooperative matrices, shaderInt8, int8 activations (the decode
// matvecs' option, which needs integer dot products) and K % 128 == 0. Up to 64 tokens, where it measured faster
// than the f16 GEMM in the model (Q4_K's long-K matrix loses on the kernel bench at 32 tokens, but whole blocks add
// the residual as fragments, and the step gains; Q4_K at 33-64 tokens with its integer sums biased).
constexpr int64_t kQ8GemmMaxTokens = 64;
// Q6_K (two integer products per block: its scales are per 16 elements) only up to 32 tokens: once every block's
// scale went into the unbiasing fma, the 8B's steps at 32 sequences gained 1 % with it (a Q6_K attn_v also spares its
// rmsnorm the f16 copy), where at 64 they lost 5 % (H200). Forced tiles (GRETA_VK_GEMM_Q8) run it at any count.
constexpr int64_t kQ6GemmMaxTokens = 32;
// Q6_K at 17-32 tokens takes the 64-row tile of four subgroups, as Q4_0 and Q4_K do, on matrices of fewer rows than
// this (few row tiles: the 8B's attn_v and ffn_down); the output projections (32000 and 128256 rows), whose grids hold
// many waves already, keep the 32-row tile. H200, 8B at 32 sequences: +1.6 % so, +1.1 % with the output matrix on it
// too; the 7B (Q6_K only in its 32000-row output) lost 1.6 % with it there (docs/benchmarks.md).
constexpr int64_t kQ6WideTileMaxRows = 16384;

struct Q8GemmTile {
  uint32_t fm = 1, fn = 1, wn = 2, bk = 128;  // BM = 16 fm tokens, BN = 16 fn wn rows, K steps of bk
  uint32_t split = 0;                         // split-K (fewer where K has fewer steps); 0: coopmat_split's rule
  bool forced = false;                        // GRETA_VK_GEMM_Q8's: its split as given
};

// matmul_coopmat_q8's shared-memory stages (STAGES): one for tiles of up to 32 tokens, two above. NVIDIA's driver
// gives compute shaders about 100 KiB of shared memory per multiprocessor (vk_alu_bench's residency table), so a
// 16-token tile's second stage halved its resident workgroups; one stage costs a second barrier per K step and made
// the 8B's batched steps at 16 and 32 sequences 4-6 % faster on the H200, while the 64-token tiles, which their
// registers bound as well, lost a little with it (docs/benchmarks.md). K steps of 256 take one stage too: two would
// not fit (Q4_K's 64 x 64 tile would need about 70 KiB).
uint32_t q8_gemm_stages(const Q8GemmTile& t) { return t.fm <= 2 || t.bk == 256 ? 1 : 2; }

// Whether the shader can run tile t for `type` on this device: at most 8 W items and 4 X items per invocation, a header
// per invocation (BN <= WG), and shared memory for the stages (q8_gemm_stages) of codes (Q6_K: X's rows 1.5 times as
// long, with the zeros between block halves), of Q4_K's min terms (f16 [16][BN] and [BM][16]) and of the scales
// (Q6_K's weight scales per 16 elements), the scales sharing their space with the per-subgroup edge tiles.
bool q8_tile_fits(const OpEncoder& e, model::GgmlType type, const Q8GemmTile& t) {
  const uint32_t sg = e.info().subgroup_size, wg = t.wn * sg, bn = 16 * t.fn * t.wn, bm = 16 * t.fm;
  const bool q6 = type == model::GgmlType::Q6_K;
  const uint32_t blocks = t.bk / 32, w_scales = q6 ? 2 * blocks : blocks, w_items = q6 ? blocks / 2 : blocks;
  const uint64_t w_row = t.bk / 16 + 1, x_row = q6 ? 3 * blocks + 1 : w_row;  // in 16 bytes
  const uint64_t stages = q8_gemm_stages(t);
  const uint64_t min_terms = type == model::GgmlType::Q4_K ? stages * 16 * (bn + bm) * 2 : 0;
  const uint64_t scratch =
      std::max<uint64_t>(stages * (uint64_t(w_scales) * bn + uint64_t(blocks) * bm) * 4, uint64_t(t.wn) * 1024);
  const uint64_t shared = stages * (bn * w_row + bm * x_row) * 16 + scratch + min_terms;
  return t.fm >= 1 && t.fm <= 4 && t.fn >= 1 && t.fn <= 4 && t.wn >= 1 && (t.bk == 128 || t.bk == 256) && bn <= wg &&
         uint64_t(bn) * w_items <= 8ull * wg && uint64_t(bm) * blocks <= 4ull * wg &&
         wg <= e.info().max_workgroup_invocations && shared <= e.info().max_shared_memory;
}

// GRETA_VK_GEMM_Q8=0 keeps the f16 GEMM, =FMxFNxWNxBK[xSPLIT] forces a tile and optionally its split-K
// (measurements).
std::optional<Q8GemmTile> q8_gemm_tile(const OpEncoder& e, model::GgmlType type, const engine::MatMulOp& op) {
  const char* v = e.switches().get("GRETA_VK_GEMM_Q8");
  if (v && std::string_view(v) == "0") return std::nullopt;
  const bool forced = v != nullptr;
  // A tile forced for the f16 GEMM (GRETA_VK_COOPMAT_TILE, greta-vk tune's candidates) asks for that kernel.
  if (e.matmul_tuning().forced || forced_tile(GemmKernel::coopmat, e)) return std::nullopt;
  if (!e.q8_matvec() || !e.features().shader_int8 || op.n_tokens > kQ8GemmMaxTokens ||
      op.in_features % 128 != 0 ||
      !has_weight_shader(WeightKernel::matmul_coopmat_q8, type) ||
      !e.info().supports_coopmat(16, 16, 32, VK_COMPONENT_TYPE_SINT8_KHR, VK_COMPONENT_TYPE_SINT32_KHR))
    return std::nullopt;
  Q8GemmTile t;
  if (forced) {
    const int n = std::sscanf(v, "%ux%ux%ux%ux%u", &t.fm, &t.fn, &t.wn, &t.bk, &t.split);
    if (n != 4 && (n != 5 || t.split < 1 || t.split > 16))
      fail("GRETA_VK_GEMM_Q8=", v, ": expected 0 or FMxFNxWNxBK[xSPLIT]");
    if (!q8_tile_fits(e, type, t)) fail("GRETA_VK_GEMM_Q8=", v, ": not a tile this device can run");
    t.forced = true;
    return t;
  }
  if (type == model::GgmlType::Q6_K && op.n_tokens > kQ6GemmMaxTokens) return std::nullopt;
  // One subgroup's 16-row block of C per 16 tokens, two subgroups side by side (16 tokens x 32 rows). At 17-32 tokens
  // Q4_0 and Q4_K take four subgroups (64 rows, split-K as the rule's 4): X's 32 rows are staged once per 64 weight
  // rows (H200, with Q6_K's GEMM to 32 tokens: the 8B's steps at 32 sequences +2.7 %, the 7B's +2.9 %), and Q6_K
  // below kQ6WideTileMaxRows rows. Above 32 tokens, four subgroups and 3 splits for Q4_0, 2 for Q4_K, where shared
  // memory allows (Q4_K's 64 x 64 tile fills NVIDIA's 48 KiB): X's 48-64 rows are staged once per 64 weight rows
  // instead of 32, and the grid keeps about as many subgroups. Q4_K's narrower tiles there lost to the f16 GEMM.
  // Q4_K's wide tile takes K steps of 256 in one stage (half the barriers and staging rounds per weight byte): the
  // 8B's steps at 48-64 sequences 3-4 % faster on the H200, where Q4_0's lost 8 % and every 256-step tile of up to 32
  // tokens lost (docs/benchmarks.md, "op_matmul.cpp's rules").
  t.fm = uint32_t((op.n_tokens + 15) / 16);
  // Q6_K reaches here only up to 32 tokens.
  const bool wide_rows = type != model::GgmlType::Q6_K || op.out_features < kQ6WideTileMaxRows;
  if (t.fm >= 2 && wide_rows) {
    Q8GemmTile wide = t;
    wide.wn = 4;
    wide.split = t.fm == 2 ? 4 : type == model::GgmlType::Q4_0 ? 3 : 2;
    if (t.fm > 2 && type == model::GgmlType::Q4_K && op.in_features % 256 == 0) wide.bk = 256;
    if (q8_tile_fits(e, type, wide)) return wide;
    if (t.fm > 2 && type == model::GgmlType::Q4_K) return std::nullopt;
  }
  if (!q8_tile_fits(e, type, t)) return std::nullopt;
  return t;
}

}  // namespace

uint32_t coopmat_stages(const MatmulTile& tile, const DeviceInfo& info) {
  return 2 * coopmat_stage_bytes(tile) <= info.max_shared_memory ? 2 : 1;
}

bool matmul_tile_valid(GemmKernel kernel, const MatmulTile& tile, const DeviceInfo& info) {
  return kernel == GemmKernel::coopmat ? coopmat_tile_valid(tile, info) : tiled_tile_valid(tile, info);
}

bool coopmat_matmul_usable(const DeviceInfo& info, const EnabledFeatures& features, model::GgmlType type) {
  return features.cooperative_matrix && info.subgroup_ops_in_compute &&
         info.supports_coopmat(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR) &&
         has_weight_shader(WeightKernel::matmul_coopmat, type) &&
         shader_available(weight_shader(WeightKernel::matmul_coopmat, type)) &&
         4 * info.subgroup_size <= info.max_workgroup_invocations;
}

namespace {

// The kernel encode_matmul runs `op` on: matvec, coopmat or tiled.
MatmulKernel matmul_path(const OpEncoder& e, const engine::MatMulOp& op) {
  const DeviceWeight& w = e.weight(op.weight);
  MatmulKernel kernel = e.matmul_kernel();
  const bool coopmat_ok = coopmat_matmul_usable(e.info(), e.features(), w.type);
  // The automatic GEMM: F32 weights keep f32 activations (coopmat rounds both operands to f16).
  const bool coopmat_auto = coopmat_ok && w.type != model::GgmlType::F32;
  // Decode (up to 4 or 8 tokens), rows that are not whole vec4, or GRETA_VK_MATMUL=matvec: op_matvec.cpp.
  if (matmul_uses_matvec(kernel, op, coopmat_auto)) return MatmulKernel::matvec;
  if (const auto& forced = e.matmul_tuning().forced)  // greta-vk tune's candidates: the kernel comes with the tile
    kernel = forced->kernel == GemmKernel::coopmat ? MatmulKernel::coopmat : MatmulKernel::tiled;
  else if (kernel == MatmulKernel::automatic)
    kernel = coopmat_auto ? MatmulKernel::coopmat : MatmulKernel::tiled;
  if (kernel == MatmulKernel::coopmat && !coopmat_ok)
    fail("vk: the cooperative-matrix matmul was requested, but ", e.info().name,
         " (or this build) has no 16x16x16 f16 cooperative matrices");
  return kernel;
}

}  // namespace

namespace {

// A batched step's GEMM on int8 cooperative matrices: X quantized once per input (OpEncoder::q8_copy, shared by Q, K
// and V), split-K as the f16 GEMM's rule (coopmat_split) over K steps of the tile's BK.
void encode_q8_gemm(OpEncoder& e, const engine::MatMulOp& op, bool accumulate, const Q8GemmTile& t) {
  const DeviceWeight& w = e.weight(op.weight);
  const MatmulPush push{to_u32(int64_t(w.row_bytes), "row bytes"), to_u32(w.rows, "rows"),
                        to_u32(op.in_features, "in features"), 0, to_u32(op.out_features, "out features"),
                        to_u32(op.n_tokens, "tokens")};
  const BufferSpan x = e.q8_copy(Q8Source{.x = op.in, .rows = op.n_tokens, .cols = op.in_features});
  const BufferSpan out = e.buffer(op.out);
  const uint32_t sg = e.info().subgroup_size, bn = 16 * t.fn * t.wn, bm = 16 * t.fm;
  const std::array<uint32_t, 2> grid{(push.rows + bn - 1) / bn, (push.n_tokens + bm - 1) / bm};
  const uint32_t k_steps = push.cols / t.bk;
  const uint64_t groups = uint64_t(grid[0]) * grid[1];
  uint32_t split = coopmat_split(groups, k_steps, e.at_barrier(), op.n_tokens, e.info(), e.switches());
  if (t.split && !forced_split(k_steps, e.switches())) {  // the tile's own, keeping coopmat_split's K steps per split
    split = std::min(t.split, k_steps);
    while (split > 1 && k_steps / split < kBatchedSplitMinSteps) --split;
    if (op.n_tokens > 32 && !t.forced) split = widen_batched_split(split, groups, k_steps, e.info());
  }
  const uint32_t per_split = (k_steps + split - 1) / split;
  split = (k_steps + per_split - 1) / per_split;  // every split non-empty
  const SplitK sk = split_k(e, split, push, out);
  PipelineOptions options;
  options.full_subgroups = e.info().compute_full_subgroups;
  if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
  const ShaderId id = weight_shader(WeightKernel::matmul_coopmat_q8, w.type);
  const auto& p = e.pipeline(
      id, {{0, t.wn * sg}, {1, t.fm}, {2, t.fn}, {3, t.wn}, {5, accumulate}, {6, t.bk}, {10, split},
           {12, q8_gemm_stages(t)}},
      options);
  e.dispatch(p, {w.matrix.chunk(0).span(), x, out, sk.partials}, as_push(push), {grid[0], grid[1], split});
  e.note_variant(cat(shader_blob(id).name, " ", bm, "x", bn, "x", t.bk, split > 1 ? cat(" split-K ", split) : ""));
  add_partials(e, sk, op.out, out);
  if (accumulate) e.note_variant("fused residual add (y += W x)");
}

// The int8 GEMM's tile for `op`, or nullopt when `op` runs elsewhere.
std::optional<Q8GemmTile> q8_gemm_for(const OpEncoder& e, const engine::MatMulOp& op) {
  if (matmul_path(e, op) != MatmulKernel::coopmat || e.weight(op.weight).matrix.chunk_count() != 1)
    return std::nullopt;
  return q8_gemm_tile(e, e.weight(op.weight).type, op);
}

}  // namespace

bool matmul_takes_q8_input(const OpEncoder& e, const engine::MatMulOp& op) { return q8_gemm_for(e, op).has_value(); }

bool matmul_takes_f16_input(const OpEncoder& e, const engine::MatMulOp& op) {
  return matmul_path(e, op) == MatmulKernel::coopmat && gemm_f16_activations(e.switches()) &&
         !matmul_takes_q8_input(e, op);
}

void encode_matmul(OpEncoder& e, const engine::MatMulOp& op, bool accumulate, std::optional<Q8Source> norm_out) {
  const DeviceWeight& w = e.weight(op.weight);
  GRETA_CHECK(w.cols == op.in_features && w.rows == op.out_features && w.rows > 1, w.name);
  to_u32(op.n_tokens * std::max(op.in_features, op.out_features), "activation elements");

  const MatmulKernel kernel = matmul_path(e, op);
  if (kernel == MatmulKernel::matvec)
    return encode_matvec(e, MatmulArgs{.op = op, .accumulate = accumulate, .norm_out = std::move(norm_out)});
  const GemmKernel gemm = kernel == MatmulKernel::coopmat ? GemmKernel::coopmat : GemmKernel::tiled;
  if (const auto q8_tile = q8_gemm_for(e, op)) return encode_q8_gemm(e, op, accumulate, *q8_tile);
  const ChosenTile chosen = choose_tile(e, gemm, w.type, op);
  const MatmulTile& tile = chosen.tile;

  const BufferSpan in = e.buffer(op.in), out = e.buffer(op.out);
  std::optional<BufferSpan> x16_input;
  for (size_t c = 0; c < w.matrix.chunk_count(); ++c) {
    const MatmulPush push{to_u32(int64_t(w.row_bytes), "row bytes"), to_u32(w.chunk_rows(c), "rows"),
                          to_u32(op.in_features, "in features"), to_u32(w.chunk_first_row(c), "row"),
                          to_u32(op.out_features, "out features"), to_u32(op.n_tokens, "tokens")};
    const BufferSpan weights = w.matrix.chunk(c).span();
    if (gemm == GemmKernel::tiled) {
      // Tile BM x BN (tokens x weight rows), K step BK, one 4 x 4 block of C per invocation: 64 x 64 x 16 on 256
      // invocations by default.
      // K split when the grid is small (tiled_split).
      const ShaderId id = weight_shader(WeightKernel::matmul_tiled, w.type);
      const uint32_t local = (tile.bm / 4) * (tile.bn / 4);
      const std::array<uint32_t, 2> grid{(push.rows + tile.bn - 1) / tile.bn, (push.n_tokens + tile.bm - 1) / tile.bm};
      const uint32_t k_steps = (push.cols + tile.bk - 1) / tile.bk;
      const uint32_t split = w.matrix.chunk_count() == 1
                                 ? tiled_split(uint64_t(grid[0]) * grid[1], k_steps, e.at_barrier(), e.switches())
                                 : 1;
      const SplitK sk = split_k(e, split, push, out);
      const auto& p =
          e.pipeline(id, {{0, local}, {1, tile.bm}, {2, tile.bn}, {3, tile.bk}, {4, accumulate}, {5, sk.split}});
      e.dispatch(p, {weights, in, out, sk.partials}, as_push(push), {grid[0], grid[1], sk.split});
      e.note_variant(cat(shader_blob(id).name, " ", tile_name(gemm, tile), " (", chosen.source, ")",
                         sk.split > 1 ? cat(" split-K ", sk.split) : ""));
      add_partials(e, sk, op.out, out);
    } else {
      // Tile BM x BN on KG groups of WM x WN subgroups, K step BK, two shared-memory stages where they fit, else
      // one: by default 128 x 128 at BK 64 on 2 K groups of 2 x 4 subgroups (4 x 2 fragments each), one stage of
      // 36 KiB; K split when the tiles are few (coopmat_split). A K step of 64 halves the staging load instructions
      // per multiply-add: each touches 4 rows' cache lines instead of 8, and the L1 load pipeline was the limit. The
      // best tile depends on the shape: greta-vk tune measures it per device and shape class (docs/benchmarks.md,
      // "op_matmul.cpp's rules").
      const uint32_t sg = e.info().subgroup_size;
      PipelineOptions options;
      options.full_subgroups = e.info().compute_full_subgroups;
      if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
      // Activations as f16 converted once per input (OpEncoder::f16_copy) rather than by every workgroup:
      // GRETA_VK_GEMM_X16=0 keeps the f32 input for comparisons.
      const bool x16 = gemm_f16_activations(e.switches());
      if (x16 && !x16_input) x16_input = e.f16_copy(op.in, uint64_t(op.n_tokens), uint64_t(op.in_features));
      // Spec constants that drop checks from the staging loads: K a multiple of BK (no partial last step), K a
      // multiple of 8 (an item's 8 halves of X are one uvec4).
      const bool k_tail = op.in_features % tile.bk != 0, x_split = op.in_features % 8 != 0;
      // Split-K when the tiles of C are too few to fill the device, only for a weight in one chunk (the partials are
      // added to whole rows of y).
      const std::array<uint32_t, 2> grid{(push.rows + tile.bn - 1) / tile.bn, (push.n_tokens + tile.bm - 1) / tile.bm};
      const uint32_t k_steps = (push.cols + tile.bk - 1) / tile.bk;
      uint32_t split = w.matrix.chunk_count() == 1
                           ? coopmat_split(uint64_t(grid[0]) * grid[1], k_steps, e.at_barrier(), op.n_tokens, e.info(),
                                           e.switches())
                           : 1;
      const uint32_t chunk = ((push.cols + split - 1) / split + tile.bk - 1) / tile.bk * tile.bk;
      split = (push.cols + chunk - 1) / chunk;  // every split non-empty
      const SplitK sk = split_k(e, split, push, out);
      const ShaderId id = weight_shader(x16 ? WeightKernel::matmul_coopmat_x16 : WeightKernel::matmul_coopmat, w.type);
      const uint32_t stages = coopmat_stages(tile, e.info());
      const uint32_t depth = coopmat_load_depth(w.type, tile, stages, e.switches());
      const auto& p = e.pipeline(id,
                                 {{0, tile.kg * tile.wm * tile.wn * sg}, {1, tile.bm}, {2, tile.bn}, {3, tile.wm},
                                  {4, tile.wn}, {5, accumulate}, {6, tile.bk}, {7, depth}, {8, k_tail},
                                  {9, x_split}, {10, split}, {11, tile.kg}, {12, stages}},
                                 options);
      e.dispatch(p, {weights, x16 ? *x16_input : in, out, sk.partials}, as_push(push), {grid[0], grid[1], split});
      // "matmul_coopmat_x16_q4_0 128x128x2x4x64x2 (default) split-K 4 depth 1 one stage": the tile next to where it
      // came from, then what differs from two stages at depth 2.
      e.note_variant(cat(shader_blob(id).name, " ", tile_name(gemm, tile), " (", chosen.source, ")",
                         split > 1 ? cat(" split-K ", split) : "", depth != 2 ? cat(" depth ", depth) : "",
                         stages == 1 ? " one stage" : ""));
      add_partials(e, sk, op.out, out);
    }
  }
  if (accumulate) e.note_variant("fused residual add (y += W x)");
}

}  // namespace greta::vk
