// Attention in flash-attention form (online softmax, no [n x n] scores in memory):
//   prefill (>= 16 tokens), head dim a multiple of 16 up to 128, device with f16 cooperative matrices, and the
//   model not an F32 one: attention_coopmat (16 queries x 32 keys per step on matrix cores; f16 Q, K, P, V)
//   otherwise: attention_f32, one workgroup per (token, query head), f32 throughout.
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
  const bool coopmat = e.f16_attention() && op.n_tokens >= 16 && op.head_dim == op.head_dim_v &&
                       op.head_dim % 16 == 0 && op.head_dim <= 128 && e.has_coopmat_f16() &&
                       shader_available(ShaderId::attention_coopmat_f16);
  if (coopmat) {
    const uint32_t sg = e.info().subgroup_size;
    PipelineOptions options;
    options.full_subgroups = e.info().compute_full_subgroups;
    if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
    const auto& p = e.pipeline(ShaderId::attention_coopmat_f16, {{0, sg}}, options);
    const uint64_t groups = uint64_t((op.n_tokens + 15) / 16) * uint64_t(op.n_heads);
    if (groups > e.info().max_workgroup_count[0]) fail("vk: attention over ", op.n_tokens, " tokens needs too many workgroups");
    e.dispatch(p, {e.buffer(op.q), e.buffer(op.k_cache), e.buffer(op.v_cache), e.buffer(op.positions),
                   e.buffer(op.out)},
               as_push(push), {uint32_t(groups), 1, 1});
    e.note_variant("attention_coopmat_f16");
    return;
  }
  const auto& p = e.pipeline(ShaderId::attention_f32, {{0, kLocal}});
  e.dispatch(p, {e.buffer(op.q), e.buffer(op.k_cache), e.buffer(op.v_cache), e.buffer(op.positions), e.buffer(op.out)},
             as_push(push), {std::min<uint32_t>(push.n_tokens * push.n_heads, e.info().max_workgroup_count[0]), 1, 1});
  e.note_variant("attention_f32");
}

}  // namespace greta::vk
