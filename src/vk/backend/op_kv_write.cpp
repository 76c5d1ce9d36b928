// KV-cache append: this step's K (or V) rows into the paged cache, at the rows named by the KvRows buffer
// (kv_write.comp; the f16 variants for F16 caches, kv_write_q8 for Q8_0 caches: one invocation per block of 32).
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_kv_write(OpEncoder& e, const engine::KvWriteOp& op) {
  const struct { uint32_t n_tokens, width; } push{to_u32(op.n_tokens, "tokens"), to_u32(op.width, "kv width")};
  to_u32(op.cache_rows * op.width, "kv cache elements");
  e.require_f32(op.src, "kv write source");
  const engine::ElemType type = e.cache_type(op.cache);
  if (type == engine::ElemType::Q8_0) {
    // Rows of whole blocks (the plan builder checks the width): n_tokens * width / 32 blocks.
    GRETA_CHECK(op.width % 32 == 0, "q8_0 kv write of width ", op.width);
    const auto& p = e.pipeline(ShaderId::kv_write_q8, {{0, kElementwiseWorkgroup}});
    e.dispatch(p, {e.buffer(op.src), e.buffer(op.cache), e.buffer(op.rows)}, as_push(push),
               {e.groups_for(uint64_t(op.n_tokens) * uint64_t(op.width / 32), kElementwiseWorkgroup), 1, 1});
    e.note_variant("kv_write_q8");
    return;
  }
  const bool f16 = type == engine::ElemType::F16, vec4 = op.width % 4 == 0;
  // Rows of a multiple of 4 elements: four per invocation (16-byte loads, 16- or 8-byte stores).
  const ShaderId id = f16 ? (vec4 ? ShaderId::kv_write_f16_vec4 : ShaderId::kv_write_f16)
                          : (vec4 ? ShaderId::kv_write_f32_vec4 : ShaderId::kv_write_f32);
  const auto& p = e.pipeline(id, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.src), e.buffer(op.cache), e.buffer(op.rows)}, as_push(push),
             {e.groups_for(uint64_t(op.n_tokens) * uint64_t(op.width / (vec4 ? 4 : 1)), kElementwiseWorkgroup), 1, 1});
  e.note_variant(cat(f16 ? "kv_write_f16" : "kv_write_f32", vec4 ? "_vec4" : ""));
}

}  // namespace greta::vk
