// Shared by rope.comp and rope_kv.comp: the rotation of one pair of a head by theta = position * inv_freq[i], scaled
// by mscale (YaRN's magnitude factor times attn_factor; 1 for plain RoPE, where the product is exact). The host folds
// freq_scale, the frequency factors and YaRN's ramp into inv_freq[i] and stores mscale after the half_dims
// frequencies (op_rope.cpp: rope_inv_freq).

// Cody-Waite reduction with 2*pi split into a float head and tail: Vulkan only bounds cos/sin's error on [-pi, pi].
float reduce_angle(float a) {
  const float two_pi_hi = 6.28318548202514648438;   // float(2 pi)
  const float two_pi_lo = -1.74845553146951690e-07;  // 2 pi - two_pi_hi
  const float k = round(a * 0.159154943091895335769);
  return (a - k * two_pi_hi) - k * two_pi_lo;
}

// The pair (a, b) rotated by the angle position * inv_freq, times mscale.
vec2 rope_rotate(float a, float b, int position, float inv_freq, float mscale) {
  const float theta = reduce_angle(float(position) * inv_freq);
  const float c = cos(theta) * mscale, s = sin(theta) * mscale;
  return vec2(a * c - b * s, a * s + b * c);
}
