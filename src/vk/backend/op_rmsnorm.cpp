// RMSNorm (also qwen3's per-head Q/K norm): one workgroup per row.
#include <algorithm>
#include <bit>

#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_rmsnorm(OpEncoder& e, const engine::RmsNormOp& op) {
  const DeviceWeight& w = e.weight(op.weight);
  GRETA_CHECK(w.rows == 1 && w.cols == op.width, w.name);
  const struct { uint32_t in_row_offset, rows, width; float eps; } push{
      to_u32(op.in_row_offset, "row offset"), to_u32(op.rows, "rows"), to_u32(op.width, "width"), op.eps};
  // One workgroup per row: 64 invocations for head-width rows (qwen3's Q/K norm over head_dim = 64..128), 256 for
  // model-width rows, and up to 1024 when there are only a few rows (decode), where the lone workgroup's latency is
  // the whole cost.
  uint32_t local = op.width >= 1024 ? 256 : 64;
  if (op.rows <= 4 && op.width >= 4096)  // the reduction needs a power of two
    local = std::bit_floor(std::min<uint32_t>(1024, e.info().max_workgroup_invocations));
  const auto& p = e.pipeline(ShaderId::rmsnorm_f32, {{0, local}});
  e.dispatch(p, {e.buffer(op.in), w.vector.span(), e.buffer(op.out)}, as_push(push),
             {std::min<uint32_t>(push.rows, e.info().max_workgroup_count[0]), 1, 1});
  e.note_variant("rmsnorm_f32");
}

}  // namespace greta::vk
