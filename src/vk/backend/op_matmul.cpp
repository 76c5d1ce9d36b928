// Matrix products with a weight of any type, dequantized inside the kernels:
//   decode (few tokens) or rows whose length is not a multiple of 4:  matvec      (bandwidth-bound; quantized
//                                                                     types: matvec_block)
//   prefill, device with 16x16x16 f16 cooperative matrices:           matmul_coopmat (not for F32 weights)
//   prefill otherwise:                                                 matmul_tiled
// A weight split over several buffers gets one dispatch per chunk; each writes its rows of the output.
// With `accumulate`, every kernel adds its product to what `out` holds (y += W x): the backend fuses a residual add
// that consumes the product into the matmul that makes it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

namespace {

// Up to this many tokens the matvec kernel (weights read once per token) beats staging tiles.
constexpr int64_t kMatvecMaxTokens = 4;

bool coopmat_usable(const OpEncoder& e, model::GgmlType type) {
  return e.has_coopmat_f16() && shader_available(weight_shader(WeightKernel::matmul_coopmat, type)) &&
         4 * e.info().subgroup_size <= e.info().max_workgroup_invocations;
}

struct CoopmatTile {
  uint32_t bm = 64, bn = 64, wm = 2, wn = 2;
};

CoopmatTile coopmat_tile_from_env() {
  CoopmatTile t;
  const char* v = std::getenv("GRETA_VK_COOPMAT_TILE");
  if (!v || !*v) return t;
  unsigned bm = 0, bn = 0, wm = 0, wn = 0;
  if (std::sscanf(v, "%ux%ux%ux%u", &bm, &bn, &wm, &wn) != 4 || wm == 0 || wn == 0 || bm % (16 * wm) != 0 ||
      bn % (16 * wn) != 0 || bm > 256 || bn > 256)
    fail("GRETA_VK_COOPMAT_TILE=", v, ": expected BMxBNxWMxWN with BM a multiple of 16*WM and BN of 16*WN, <= 256");
  return {bm, bn, wm, wn};
}

struct MatmulPush {
  uint32_t row_bytes, rows, cols, out_row0, out_stride, n_tokens;
};

}  // namespace

void encode_matmul(OpEncoder& e, const engine::MatMulOp& op, bool accumulate) {
  const DeviceWeight& w = e.weight(op.weight);
  GRETA_CHECK(w.cols == op.in_features && w.rows == op.out_features && w.rows > 1, w.name);
  to_u32(op.n_tokens * std::max(op.in_features, op.out_features), "activation elements");

  MatmulKernel kernel = e.matmul_kernel();
  if (kernel == MatmulKernel::automatic) {
    if (op.n_tokens <= kMatvecMaxTokens || op.in_features % 4 != 0)
      kernel = MatmulKernel::matvec;
    else  // F32 weights keep f32 activations: the cooperative-matrix path rounds both operands to f16
      kernel = w.type != model::GgmlType::F32 && coopmat_usable(e, w.type) ? MatmulKernel::coopmat : MatmulKernel::tiled;
  }
  if (kernel != MatmulKernel::matvec && op.in_features % 4 != 0) kernel = MatmulKernel::matvec;
  if (kernel == MatmulKernel::coopmat && !coopmat_usable(e, w.type))
    fail("vk: the cooperative-matrix matmul was requested, but ", e.info().name,
         " (or this build) has no 16x16x16 f16 cooperative matrices");

  const BufferSpan in = e.buffer(op.in), out = e.buffer(op.out);
  for (size_t c = 0; c < w.matrix.chunk_count(); ++c) {
    const MatmulPush push{to_u32(int64_t(w.row_bytes), "row bytes"), to_u32(w.chunk_rows(c), "rows"),
                          to_u32(op.in_features, "in features"), to_u32(w.chunk_first_row(c), "row"),
                          to_u32(op.out_features, "out features"), to_u32(op.n_tokens, "tokens")};
    const BufferSpan weights = w.matrix.chunk(c).span();
    if (kernel == MatmulKernel::matvec) {
      // 2 rows per workgroup of 128: enough workgroups to fill a GPU even for 2048-row matrices (and, for the
      // block-wise kernel, the fastest of the 1..8 rows x 32..256 invocations measured on an H100: docs/benchmarks.md).
      // Quantized rows (always a multiple of 32 elements) take the block-wise kernel, f32/f16/bf16 the generic one.
      constexpr uint32_t kLocal = 128, kRows = 2;
      const bool block = has_weight_shader(WeightKernel::matvec_block, w.type) && push.cols % 32 == 0;
      const ShaderId id = weight_shader(block ? WeightKernel::matvec_block : WeightKernel::matvec, w.type);
      const auto& p = e.pipeline(id, {{0, kLocal}, {1, kRows}, {2, accumulate}});
      const uint32_t row_groups = (push.rows + kRows - 1) / kRows;
      // The first five fields are the matvec kernels' push block.
      struct { uint32_t row_bytes, rows, cols, out_row0, out_stride; } mv{push.row_bytes, push.rows, push.cols,
                                                                         push.out_row0, push.out_stride};
      e.dispatch(p, {weights, in, out}, as_push(mv),
                 {std::min(row_groups, e.info().max_workgroup_count[0]), push.n_tokens, 1});
      e.note_variant(shader_blob(id).name);
    } else if (kernel == MatmulKernel::tiled) {
      constexpr uint32_t kTile = 64, kLocal = 256, kBk = 16;
      const ShaderId id = weight_shader(WeightKernel::matmul_tiled, w.type);
      const auto& p = e.pipeline(id, {{0, kLocal}, {1, kTile}, {2, kTile}, {3, kBk}, {4, accumulate}});
      e.dispatch(p, {weights, in, out}, as_push(push),
                 {(push.rows + kTile - 1) / kTile, (push.n_tokens + kTile - 1) / kTile, 1});
      e.note_variant(shader_blob(id).name);
    } else {
      // Tile (BM x BN) and subgroup grid (WM x WN): 64 x 64 on 2 x 2 subgroups by default. On the H100 (512x4096x4096,
      // f16 / q4_0 TFLOP/s) 64x64x2x2: 20.2 / 25.8; 128x128x2x2: 12.9 / -; 128x128x2x4: 18.8 / 23.0; 64x128x2x4:
      // 25.2 / 26.2; 128x128x4x4: 25.2 / 26.9 -- all within 1.3x: the kernel is bound by staging (dequant, f16
      // conversion, scalar shared stores), not by the tile shape. GRETA_VK_COOPMAT_TILE=BMxBNxWMxWN overrides it.
      CoopmatTile tile = coopmat_tile_from_env();
      const uint32_t bm = tile.bm, bn = tile.bn;
      const uint32_t sg = e.info().subgroup_size;
      PipelineOptions options;
      options.full_subgroups = e.info().compute_full_subgroups;
      if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
      const ShaderId id = weight_shader(WeightKernel::matmul_coopmat, w.type);
      const auto& p = e.pipeline(id, {{0, tile.wm * tile.wn * sg}, {1, bm}, {2, bn}, {3, tile.wm}, {4, tile.wn}, {5, accumulate}},
                                 options);
      e.dispatch(p, {weights, in, out}, as_push(push), {(push.rows + bn - 1) / bn, (push.n_tokens + bm - 1) / bm, 1});
      e.note_variant(shader_blob(id).name);
    }
  }
  if (accumulate) e.note_variant("fused residual add (y += W x)");
}

}  // namespace greta::vk
