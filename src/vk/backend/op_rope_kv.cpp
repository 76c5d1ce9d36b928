// Decode's rope_q + rope_k + k_cache (+ v_cache) as one dispatch of rope_kv.comp (fused by the backend: fusion.h).
// Q and K are rotated in place as encode_rope does (same frequencies, same rotation code), the rotated K rows and the
// V rows go to the cache rows named by the KvRows buffer (the paged cache; f32 or f16 caches, both the same type).
// With the per-head q/k norms folded in (qwen3, qwen3moe, gemma3), qk_norm_rope_kv.comp: one workgroup per head.
#include <array>

#include "vk/backend/encoder.h"

namespace greta::vk {

namespace {

// The split-K partials of q, k and v that the backend handed over (OpEncoder::take_split_sum; count 0: none).
struct QkvPartials {
  OpEncoder::SplitPartials q, k, v;
  bool any() const { return q.count || k.count || v.count; }
};

// Bindings 0-7 as rope_kv.comp's; 8 and 9 the norm weights, 10-12 the partials.
void encode_qk_norm_rope_kv(OpEncoder& e, const RopeKvArgs& a, const std::array<BufferSpan, 8>& b, uint32_t v_width,
                            bool f16, bool adjacent, const QkvPartials& parts) {
  const engine::RopeOp &q = a.q, &k = a.k;
  const engine::RmsNormOp &qn = *a.q_norm, &kn = *a.k_norm;
  GRETA_CHECK(a.k_norm && qn.in == q.x && qn.out == q.x && kn.in == k.x && kn.out == k.x &&
                  qn.rows == q.n_tokens * q.n_heads && kn.rows == k.n_tokens * k.n_heads && qn.width == q.head_dim &&
                  kn.width == k.head_dim && qn.in_row_offset == 0 && kn.in_row_offset == 0,
              "q/k norms do not match the rope");
  const DeviceWeight &qw = e.weight(qn.weight), &kw = e.weight(kn.weight);
  GRETA_CHECK(qw.rows == 1 && qw.cols == q.head_dim && kw.rows == 1 && kw.cols == k.head_dim, "q/k norm weights");
  const struct {
    uint32_t n_heads, n_kv_heads, head_dim, rope_dims, v_width;
    float q_eps, k_eps;
    uint32_t q_parts, q_stride, k_parts, k_stride, v_parts, v_stride;
  } push{to_u32(q.n_heads, "heads"), to_u32(k.n_heads, "kv heads"), to_u32(q.head_dim, "head dim"),
         to_u32(q.rope_dims, "rope dims"), v_width, qn.eps, kn.eps,
         parts.q.count, parts.q.stride, parts.k.count, parts.k.stride, parts.v.count, parts.v.stride};
  // One workgroup per head of 64 invocations (a head of 128 is 64 pairs), then the V rows in pieces of 64.
  constexpr uint32_t kLocal = 64;
  const uint32_t groups = push.n_heads + push.n_kv_heads + (v_width + kLocal - 1) / kLocal;
  const auto& p = e.pipeline(f16 ? ShaderId::qk_norm_rope_kv_f32_kvf16 : ShaderId::qk_norm_rope_kv_f32,
                             {{0, kLocal}, {1, adjacent ? 1u : 0u}});
  e.dispatch(p,
             {b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], qw.vector.span(), kw.vector.span(),
              parts.q.count ? parts.q.partials : b[0], parts.k.count ? parts.k.partials : b[1],
              parts.v.count ? parts.v.partials : b[2]},
             as_push(push), {groups, to_u32(q.n_tokens, "tokens"), 1});
  e.note_variant(cat(f16 ? "qk_norm_rope_kv_f32_kvf16" : "qk_norm_rope_kv_f32",
                     adjacent ? " (adjacent pairs)" : " (neox halves)"));
  e.note_variant(a.v_write ? "fused q/k norms + rope_q + rope_k + k/v cache writes"
                           : "fused q/k norms + rope_q + rope_k + k cache write");
  if (parts.any()) e.note_variant("adds the split-K partials of q, k and v");
}

}  // namespace

void encode_rope_kv(OpEncoder& e, const RopeKvArgs& a) {
  const engine::RopeOp &q = a.q, &k = a.k;
  const engine::KvWriteOp& kw = a.k_write;
  GRETA_CHECK(q.positions == k.positions && q.n_tokens == k.n_tokens && q.head_dim == k.head_dim &&
                  q.rope_dims == k.rope_dims && q.pairing == k.pairing && q.base == k.base &&
                  q.freq_scale == k.freq_scale && q.freq_factors == k.freq_factors && q.ext_factor == k.ext_factor &&
                  q.attn_factor == k.attn_factor && q.yarn_low == k.yarn_low && q.yarn_high == k.yarn_high,
              "rope_q and rope_k differ");
  GRETA_CHECK(kw.src == k.x && kw.n_tokens == k.n_tokens && kw.width == k.n_heads * k.head_dim,
              "k_cache write does not match rope_k");
  to_u32(kw.cache_rows * kw.width, "kv cache elements");
  const engine::ElemType type = e.cache_type(kw.cache);
  // No Q8_0 variant: fusion.cpp leaves rope + kv_write_q8 unfused for Q8_0 caches.
  GRETA_CHECK(type != engine::ElemType::Q8_0, "rope_kv over a q8_0 cache");
  const bool f16 = type == engine::ElemType::F16;
  const BufferSpan freq = rope_inv_freq(e, q);
  const BufferSpan qb = e.buffer(q.x), kb = e.buffer(k.x), k_cache = e.buffer(kw.cache);
  // Without a V write the V bindings get K's buffers (never accessed: v_width is 0).
  BufferSpan v = kb, v_cache = k_cache;
  uint32_t v_width = 0;
  if (a.v_write) {
    const engine::KvWriteOp& vw = *a.v_write;
    GRETA_CHECK(vw.rows == kw.rows && vw.n_tokens == k.n_tokens && e.cache_type(vw.cache) == type,
                "v_cache write does not match k_cache");
    to_u32(vw.cache_rows * vw.width, "kv cache elements");
    v = e.buffer(vw.src);
    v_cache = e.buffer(vw.cache);
    v_width = to_u32(vw.width, "v width");
  }
  // The split-K partials of q, k and v when the backend handed them over (OpEncoder::take_split_sum; rope_kv.comp
  // only where the rotation covers whole heads, so that every element of q is written back: split_sum_readers).
  QkvPartials parts{e.take_split_sum(q.x), e.take_split_sum(k.x),
                    a.v_write ? e.take_split_sum(a.v_write->src) : OpEncoder::SplitPartials{}};
  GRETA_CHECK(a.q_norm || !parts.q.count || q.rope_dims == q.head_dim, "split-K partials of q under a partial rotation");
  const struct {
    uint32_t n_tokens, n_heads, n_kv_heads, head_dim, rope_dims, v_width;
    uint32_t q_parts, q_stride, k_parts, k_stride, v_parts, v_stride;
  } push{to_u32(q.n_tokens, "tokens"),  to_u32(q.n_heads, "heads"),        to_u32(k.n_heads, "kv heads"),
         to_u32(q.head_dim, "head dim"), to_u32(q.rope_dims, "rope dims"), v_width,
         parts.q.count,                 parts.q.stride,                    parts.k.count,
         parts.k.stride,                parts.v.count,                     parts.v.stride};
  const uint64_t items = uint64_t(q.n_heads) * uint64_t(q.rope_dims / 2) +
                         uint64_t(k.n_heads) * uint64_t(k.head_dim - k.rope_dims / 2) + v_width;
  to_u32(int64_t(items) * q.n_tokens, "rope_kv items");
  const bool adjacent = q.pairing == model::RopePairing::Adjacent;
  if (a.q_norm) {
    encode_qk_norm_rope_kv(e, a, {qb, kb, v, k_cache, v_cache, e.buffer(q.positions), freq, e.buffer(kw.rows)}, v_width,
                           f16, adjacent, parts);
    return;
  }
  const auto& p = e.pipeline(f16 ? ShaderId::rope_kv_f32_kvf16 : ShaderId::rope_kv_f32,
                             {{0, kElementwiseWorkgroup}, {1, adjacent ? 1u : 0u}});
  e.dispatch(p,
             {qb, kb, v, k_cache, v_cache, e.buffer(q.positions), freq, e.buffer(kw.rows),
              parts.q.count ? parts.q.partials : qb, parts.k.count ? parts.k.partials : kb,
              parts.v.count ? parts.v.partials : v},
             as_push(push), {e.groups_for(items * uint64_t(q.n_tokens), kElementwiseWorkgroup), 1, 1});
  e.note_variant(cat(f16 ? "rope_kv_f32_kvf16" : "rope_kv_f32", adjacent ? " (adjacent pairs)" : " (neox halves)"));
  if (parts.any()) e.note_variant("adds the split-K partials of q, k and v");
  e.note_variant(a.v_write ? "fused rope_q + rope_k + k/v cache writes" : "fused rope_q + rope_k + k cache write");
}

}  // namespace greta::vk
