// RoPE: the inverse frequencies (with freq_scale and the optional Llama-3.1 frequency factors folded in) are computed
// once per plan on the host in double precision and kept in a small device buffer; the kernel only multiplies by the
// position and rotates.
#include <cmath>
#include <vector>

#include "vk/backend/encoder.h"

namespace greta::vk {

BufferSpan rope_inv_freq(OpEncoder& e, const engine::RopeOp& op) {
  const int64_t half = op.rope_dims / 2;
  GRETA_CHECK(half > 0 && op.rope_dims <= op.head_dim, "rope dims ", op.rope_dims);
  std::vector<float> factors;
  if (op.freq_factors != engine::kNoWeight) {
    const DeviceWeight& f = e.weight(op.freq_factors);
    GRETA_CHECK(f.rows == 1 && f.cols >= half, f.name);
    factors = f.host_values;
  }
  std::vector<float> inv_freq(size_t(half), 0.f);
  for (int64_t i = 0; i < half; ++i) {
    const double factor = factors.empty() ? 1.0 : double(factors[size_t(i)]);
    inv_freq[size_t(i)] = float(double(op.freq_scale) * std::pow(double(op.base), -2.0 * double(i) / double(op.rope_dims)) / factor);
  }
  return e.constant_buffer(inv_freq, "rope inv_freq");
}

void encode_rope(OpEncoder& e, const engine::RopeOp& op) {
  const int64_t half = op.rope_dims / 2;
  const BufferSpan freq = rope_inv_freq(e, op);
  const struct { uint32_t n_tokens, n_heads, head_dim, rope_dims; } push{
      to_u32(op.n_tokens, "tokens"), to_u32(op.n_heads, "heads"), to_u32(op.head_dim, "head dim"),
      to_u32(op.rope_dims, "rope dims")};
  const bool adjacent = op.pairing == model::RopePairing::Adjacent;
  const auto& p = e.pipeline(ShaderId::rope_f32, {{0, kElementwiseWorkgroup}, {1, adjacent ? 1u : 0u}});
  e.dispatch(p, {e.buffer(op.x), e.buffer(op.positions), freq}, as_push(push),
             {e.groups_for(uint64_t(op.n_tokens) * uint64_t(op.n_heads) * uint64_t(half), kElementwiseWorkgroup), 1, 1});
  e.note_variant(adjacent ? "rope_f32 (adjacent pairs)" : "rope_f32 (neox halves)");
}

}  // namespace greta::vk
