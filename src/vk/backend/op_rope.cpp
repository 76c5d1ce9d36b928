// RoPE: the inverse frequencies (with freq_scale and the optional Llama-3.1 frequency factors folded in) are computed
// once per plan on the host in double precision and kept in a small device buffer; the kernel only multiplies by the
// position and rotates. YaRN (engine::RopeOp) blends the scaled and unscaled angle per pair, theta_i = e_i *
// (freq_scale * (1 - mix_i) + mix_i) with e_i = p * base^(-2i/d) / factor_i: still position * a per-pair constant, so
// it folds into inv_freq too; the magnitude factor (attn_factor, times 1 + 0.1 ln(1 / freq_scale) with YaRN) is the
// buffer's last element, multiplied into cos and sin by rope.glsl.
#include <algorithm>
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
  std::vector<float> inv_freq(size_t(half) + 1, 0.f);
  double mscale = double(op.attn_factor);
  if (op.ext_factor != 0.f) mscale *= 1.0 + 0.1 * std::log(1.0 / double(op.freq_scale));
  for (int64_t i = 0; i < half; ++i) {
    const double factor = factors.empty() ? 1.0 : double(factors[size_t(i)]);
    double scale = double(op.freq_scale);
    if (op.ext_factor != 0.f) {  // YaRN's ramp, as the CPU reference computes it
      const double y = (double(i) - double(op.yarn_low)) / std::max(0.001, double(op.yarn_high) - double(op.yarn_low));
      const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * double(op.ext_factor);
      scale = scale * (1.0 - mix) + mix;
    }
    inv_freq[size_t(i)] = float(scale * std::pow(double(op.base), -2.0 * double(i) / double(op.rope_dims)) / factor);
  }
  inv_freq[size_t(half)] = float(mscale);
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
