#version 450
// Merges the key splits of attention.comp (split_keys > 0): for each (token, head) row r and output dimension d,
//   m = max_s m_s,  out[r, d] = sum_s exp(m_s - m) acc_s[d] / sum_s exp(m_s - m) l_s
// over the n_splits partials [rows, n_splits, head_dim_v + 2] = (acc, m, l). Splits without keys have m_s = -inf
// and contribute nothing; the split holding the token's own key (inside any sliding window) has a finite m. A sink
// is in split 0's (m, l) already (attention.comp). One invocation per (row, d); grid-stride.
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Partials { float partials[]; };
layout(binding = 1) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push { uint rows; uint n_splits; uint head_dim_v; } pc;
void main() {
  const uint count = pc.rows * pc.head_dim_v;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint row_floats = pc.head_dim_v + 2;
  for (uint item = gl_GlobalInvocationID.x; item < count; item += stride) {
    const uint r = item / pc.head_dim_v, d = item - r * pc.head_dim_v;
    const uint base = r * pc.n_splits * row_floats;
    float m = -1.0 / 0.0;
    for (uint s = 0; s < pc.n_splits; ++s) m = max(m, partials[base + s * row_floats + pc.head_dim_v]);
    float num = 0.0, den = 0.0;
    for (uint s = 0; s < pc.n_splits; ++s) {
      const uint b = base + s * row_floats;
      const float m_s = partials[b + pc.head_dim_v];
      if (m_s == -1.0 / 0.0) continue;
      const float w = exp(m_s - m);
      num += w * partials[b + d];
      den += w * partials[b + pc.head_dim_v + 1];
    }
    o[item] = num / den;
  }
}
