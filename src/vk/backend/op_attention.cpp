// Attention: flash-attention form (online softmax), one workgroup per (token, query head); see attention.comp.
#include "core/error.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_attention(OpEncoder& e, const engine::AttentionOp& op) {
  constexpr uint32_t kLocal = 64;  // keys per block; attention.comp covers head_dim_v <= 4 * kLocal
  if (op.head_dim > 512 || op.head_dim_v > 4 * int64_t(kLocal))
    fail("vk: attention with head dim ", op.head_dim, " / ", op.head_dim_v, " is not supported (at most 256)");
  GRETA_CHECK(op.n_kv_heads > 0 && op.n_heads % op.n_kv_heads == 0);
  to_u32(op.ctx * op.n_kv_heads * std::max(op.head_dim, op.head_dim_v), "kv cache elements");
  const struct { uint32_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v; float scale; } push{
      to_u32(op.n_tokens, "tokens"), to_u32(op.n_heads, "heads"), to_u32(op.n_kv_heads, "kv heads"),
      to_u32(op.head_dim, "head dim"), to_u32(op.head_dim_v, "head dim v"), op.scale};
  const auto& p = e.pipeline(ShaderId::attention_f32, {{0, kLocal}});
  e.dispatch(p, {e.buffer(op.q), e.buffer(op.k_cache), e.buffer(op.v_cache), e.buffer(op.positions), e.buffer(op.out)},
             as_push(push), {std::min<uint32_t>(push.n_tokens * push.n_heads, e.info().max_workgroup_count[0]), 1, 1});
  e.note_variant("attention_f32");
}

}  // namespace greta::vk
