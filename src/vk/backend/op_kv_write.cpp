// KV-cache append: this step's K (or V) rows into the paged cache, at the rows named by the KvRows buffer
// (kv_write.comp; the f16 variant for F16 caches).
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_kv_write(OpEncoder& e, const engine::KvWriteOp& op) {
  const struct { uint32_t n_tokens, width; } push{to_u32(op.n_tokens, "tokens"), to_u32(op.width, "kv width")};
  to_u32(op.cache_rows * op.width, "kv cache elements");
  e.require_f32(op.src, "kv write source");
  const bool f16 = e.f16_cache(op.cache), vec4 = op.width % 4 == 0;
  // Rows of a multiple of 4 elements: four per invocation (16-byte loads, 16- or 8-byte stores).
  const ShaderId id = f16 ? (vec4 ? ShaderId::kv_write_f16_vec4 : ShaderId::kv_write_f16)
                          : (vec4 ? ShaderId::kv_write_f32_vec4 : ShaderId::kv_write_f32);
  const auto& p = e.pipeline(id, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.src), e.buffer(op.cache), e.buffer(op.rows)}, as_push(push),
             {e.groups_for(uint64_t(op.n_tokens) * uint64_t(op.width / (vec4 ? 4 : 1)), kElementwiseWorkgroup), 1, 1});
  e.note_variant(cat(f16 ? "kv_write_f16" : "kv_write_f32", vec4 ? "_vec4" : ""));
}

}  // namespace greta::vk
