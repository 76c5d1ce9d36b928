// The rows whose logits a step returns, gathered before the final norm (gather_rows.comp): out[r, :] = in[rows[r], :].
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_gather_rows(OpEncoder& e, const engine::GatherRowsOp& op) {
  const struct { uint32_t n_rows, width; } push{to_u32(op.n_rows, "gathered rows"), to_u32(op.width, "row width")};
  to_u32(op.n_rows * op.width, "gathered elements");
  e.require_f32(op.in, "gather input");
  e.require_f32(op.out, "gather output");
  const auto& p = e.pipeline(ShaderId::gather_rows_f32, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.in), e.buffer(op.rows), e.buffer(op.out)}, as_push(push),
             {e.groups_for(uint64_t(op.n_rows) * uint64_t(op.width), kElementwiseWorkgroup), 1, 1});
  e.note_variant("gather_rows_f32");
}

}  // namespace greta::vk
