// KV-cache append: this step's K (or V) rows into the paged cache, at the rows named by the KvRows buffer
// (kv_write.comp; the f16 variant for F16 caches).
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_kv_write(OpEncoder& e, const engine::KvWriteOp& op) {
  const struct { uint32_t n_tokens, width; } push{to_u32(op.n_tokens, "tokens"), to_u32(op.width, "kv width")};
  to_u32(op.cache_rows * op.width, "kv cache elements");
  e.require_f32(op.src, "kv write source");
  const bool f16 = e.f16_cache(op.cache);
  const auto& p = e.pipeline(f16 ? ShaderId::kv_write_f16 : ShaderId::kv_write_f32, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.src), e.buffer(op.cache), e.buffer(op.rows)}, as_push(push),
             {e.groups_for(uint64_t(op.n_tokens) * uint64_t(op.width), kElementwiseWorkgroup), 1, 1});
  e.note_variant(f16 ? "kv_write_f16" : "kv_write_f32");
}

}  // namespace greta::vk
