// KV-cache append: this step's K (or V) rows into the cache rows named by the positions buffer.
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_kv_write(OpEncoder& e, const engine::KvWriteOp& op) {
  const struct { uint32_t n_tokens, width; } push{to_u32(op.n_tokens, "tokens"), to_u32(op.width, "kv width")};
  to_u32(op.ctx * op.width, "kv cache elements");
  const auto& p = e.pipeline(ShaderId::kv_write_f32, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.src), e.buffer(op.cache), e.buffer(op.positions)}, as_push(push),
             {e.groups_for(uint64_t(op.n_tokens) * uint64_t(op.width), kElementwiseWorkgroup), 1, 1});
  e.note_variant("kv_write_f32");
}

}  // namespace greta::vk
