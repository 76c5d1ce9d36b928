// RMSNorm (also qwen3's per-head Q/K norm): one workgroup per row.
#include <cstring>

#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_rmsnorm(OpEncoder& e, const engine::RmsNormOp& op) {
  const DeviceWeight& w = e.weight(op.weight);
  GRETA_CHECK(w.rows == 1 && w.cols == op.width, w.name);
  const struct { uint32_t in_row_offset, rows, width; float eps; } push{
      to_u32(op.in_row_offset, "row offset"), to_u32(op.rows, "rows"), to_u32(op.width, "width"), op.eps};
  // 256 invocations for model-width rows, fewer for head-width rows (qwen3's Q/K norm over head_dim = 64..128).
  const uint32_t local = op.width >= 1024 ? 256 : 64;
  const auto& p = e.pipeline(ShaderId::rmsnorm_f32, {{0, local}});
  e.dispatch(p, {e.buffer(op.in), w.vector.span(), e.buffer(op.out)}, as_push(push),
             {std::min<uint32_t>(push.rows, e.info().max_workgroup_count[0]), 1, 1});
  e.note_variant("rmsnorm_f32");
}

}  // namespace greta::vk
