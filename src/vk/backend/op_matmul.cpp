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

bool coopmat_usable(const OpEncoder& e, model::GgmlType type) {
  return e.has_coopmat_f16() && shader_available(weight_shader(WeightKernel::matmul_coopmat, type)) &&
         4 * e.info().subgroup_size <= e.info().max_workgroup_invocations;
}

struct CoopmatTile {
  uint32_t bm = 128, bn = 64, wm = 4, wn = 2, bk = 64;
};

// matmul_coopmat.comp's limits: at most 4 x 4 fragments per subgroup, BK a multiple of 16, and at most 4 staged
// uvec4 (8 halves each) of X and of W per invocation and K step; its shared memory must fit the device.
bool coopmat_tile_valid(const CoopmatTile& t, const DeviceInfo& info) {
  const uint32_t threads = t.wm * t.wn * info.subgroup_size;
  const uint64_t shared_bytes = uint64_t(t.bm + t.bn) * (t.bk / 8 + 1) * 16 + uint64_t(t.wm) * t.wn * 1024;
  if (threads > info.max_workgroup_invocations || shared_bytes > info.max_shared_memory) return false;
  return t.wm > 0 && t.wn > 0 && t.bm % (16 * t.wm) == 0 && t.bn % (16 * t.wn) == 0 && t.bm / t.wm <= 64 &&
         t.bn / t.wn <= 64 && t.bk % 16 == 0 && t.bk > 0 && t.bm * t.bk / 8 <= 4 * threads &&
         t.bn * t.bk / 8 <= 4 * threads;
}

CoopmatTile coopmat_tile_from_env(const DeviceInfo& info) {
  CoopmatTile t;
  const char* v = std::getenv("GRETA_VK_COOPMAT_TILE");
  if (!v || !*v) return t;
  unsigned bm = 0, bn = 0, wm = 0, wn = 0, bk = 32;
  const int n = std::sscanf(v, "%ux%ux%ux%ux%u", &bm, &bn, &wm, &wn, &bk);
  if ((n != 4 && n != 5) || !coopmat_tile_valid({bm, bn, wm, wn, bk}, info))
    fail("GRETA_VK_COOPMAT_TILE=", v, ": expected BMxBNxWMxWN[xBK] with BM a multiple of 16*WM, BN of 16*WN, at most 4 ",
         "fragments of 16 per subgroup each way, BK a multiple of 16, and BM*BK/8, BN*BK/8 <= 4*WM*WN*", info.subgroup_size,
         ", within the device's workgroup and shared-memory limits");
  return {bm, bn, wm, wn, bk};
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
  // Decode (up to 4 tokens), rows that are not whole vec4, or GRETA_VK_MATMUL=matvec: op_matvec.cpp.
  if (matmul_uses_matvec(kernel, op)) return encode_matvec(e, MatmulArgs{op, accumulate, {}, {}});
  if (kernel == MatmulKernel::automatic)  // F32 weights keep f32 activations: coopmat rounds both operands to f16
    kernel = w.type != model::GgmlType::F32 && coopmat_usable(e, w.type) ? MatmulKernel::coopmat : MatmulKernel::tiled;
  if (kernel == MatmulKernel::coopmat && !coopmat_usable(e, w.type))
    fail("vk: the cooperative-matrix matmul was requested, but ", e.info().name,
         " (or this build) has no 16x16x16 f16 cooperative matrices");

  const BufferSpan in = e.buffer(op.in), out = e.buffer(op.out);
  for (size_t c = 0; c < w.matrix.chunk_count(); ++c) {
    const MatmulPush push{to_u32(int64_t(w.row_bytes), "row bytes"), to_u32(w.chunk_rows(c), "rows"),
                          to_u32(op.in_features, "in features"), to_u32(w.chunk_first_row(c), "row"),
                          to_u32(op.out_features, "out features"), to_u32(op.n_tokens, "tokens")};
    const BufferSpan weights = w.matrix.chunk(c).span();
    if (kernel == MatmulKernel::tiled) {
      constexpr uint32_t kTile = 64, kLocal = 256, kBk = 16;
      const ShaderId id = weight_shader(WeightKernel::matmul_tiled, w.type);
      const auto& p = e.pipeline(id, {{0, kLocal}, {1, kTile}, {2, kTile}, {3, kBk}, {4, accumulate}});
      e.dispatch(p, {weights, in, out}, as_push(push),
                 {(push.rows + kTile - 1) / kTile, (push.n_tokens + kTile - 1) / kTile, 1});
      e.note_variant(shader_blob(id).name);
    } else {
      // Tile BM x BN on a WM x WN subgroup grid, K step BK: 128 x 64 on 4 x 2 subgroups, BK 64 by default (each
      // subgroup 2 x 2 fragments). On the H100 (TFLOP/s, q4_0 at 512x4096x4096 / 512x11008x4096 / 4096^3):
      // 64x64x2x2x32 65.5 / 52.4 / 68.1; 128x128x2x4x64 73.0 / 53.0 / 63.5; 64x128x2x4x64 77.0 / 62.8 / 78.0;
      // 128x64x4x2x64 89.8 / 66.7 / 82.7; 256x128x4x2x32 49.2 / 51.0 / 72.4 (docs/benchmarks.md).
      // GRETA_VK_COOPMAT_TILE=BMxBNxWMxWN[xBK] overrides it.
      const uint32_t sg = e.info().subgroup_size;
      const CoopmatTile tile = coopmat_tile_from_env(e.info());
      const uint32_t bm = tile.bm, bn = tile.bn;
      PipelineOptions options;
      options.full_subgroups = e.info().compute_full_subgroups;
      if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
      const ShaderId id = weight_shader(WeightKernel::matmul_coopmat, w.type);
      const auto& p = e.pipeline(id, {{0, tile.wm * tile.wn * sg}, {1, bm}, {2, bn}, {3, tile.wm}, {4, tile.wn}, {5, accumulate}, {6, tile.bk}},
                                 options);
      e.dispatch(p, {weights, in, out}, as_push(push), {(push.rows + bn - 1) / bn, (push.n_tokens + bm - 1) / bm, 1});
      e.note_variant(shader_blob(id).name);
    }
  }
  if (accumulate) e.note_variant("fused residual add (y += W x)");
}

}  // namespace greta::vk
