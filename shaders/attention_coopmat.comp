#version 450
// Causal prefill attention on cooperative matrices (VK_KHR_cooperative_matrix 16x16x16, f16 operands, f32
// accumulation), flash-attention form: the same contract as attention.comp for head dims that are multiples of 16
// and at most 128.
//
// One workgroup = one subgroup (local size = the subgroup size, spec constant 0) owns a block of 16 consecutive
// query tokens of one head h (KV head g = h / (n_heads / n_kv_heads)). Q (16 x D) is converted to f16 and staged in
// shared memory. Keys and values are visited in blocks of 32 staged as f16 in shared memory (row-major
// [key][dim], so K read column-major is K^T):
//   S (16 x 32) = Q K^T                          2 accumulators, D/16 steps each  -> shared, f32
//   online softmax per query row (invocations 0..15, one row each): causal mask key > positions[t] -> -inf,
//     running max m and denominator l, P = exp(S - m_new) as f16 -> shared, correction exp(m_old - m_new)
//   O (16 x D, f32 in shared) = O * correction + P V    (D/16 accumulators, 2 steps each)
// and finally out = O / l. Rows past n_tokens are computed with everything masked and never written.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 1) readonly buffer K { vec4 k_cache[]; };  // D % 16 == 0: every head's row starts on a vec4
layout(binding = 2) readonly buffer V { vec4 v_cache[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint head_dim_v; float scale;
} pc;

const uint BR = 16;     // query rows per workgroup
const uint BC = 32;     // keys per block
const uint MAX_D = 128;
shared float16_t qs[BR * MAX_D];
shared f16vec4 ks[BC * MAX_D / 4];  // staged 4 dims at a time; fragment offsets and strides in f16vec4
shared f16vec4 vs[BC * MAX_D / 4];
shared float ss[BR * BC];
shared float16_t ps[BR * BC];
shared vec4 os[BR * MAX_D / 4];
shared vec4 otmp[BR * MAX_D / 4];
shared float row_m[BR], row_l[BR], row_corr[BR];
shared int row_pos[BR];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

void main() {
  const uint lane = gl_LocalInvocationID.x, n_lanes = gl_WorkGroupSize.x;
  const uint D = pc.head_dim;  // == head_dim_v, checked by the host
  const uint blocks = (pc.n_tokens + BR - 1) / BR;
  const uint h = gl_WorkGroupID.x % pc.n_heads, t0 = (gl_WorkGroupID.x / pc.n_heads) * BR;
  const uint g = h / (pc.n_heads / pc.n_kv_heads);
  const uint D4 = D / 4, kv_stride4 = pc.n_kv_heads * D4;

  // Stage Q, clear O, set up the rows.
  for (uint i = lane; i < BR * D; i += n_lanes) {
    const uint r = i / D, d = i - r * D, t = t0 + r;
    qs[i] = float16_t(t < pc.n_tokens ? q[(t * pc.n_heads + h) * D + d] : 0.0);
  }
  for (uint i = lane; i < BR * D4; i += n_lanes) os[i] = vec4(0.0);
  if (lane < BR) {
    const uint t = t0 + lane;
    row_pos[lane] = t < pc.n_tokens ? positions[t] : -1;
    row_m[lane] = -1.0 / 0.0;
    row_l[lane] = 0.0;
  }
  barrier();
  int max_pos = -1;
  for (uint r = 0; r < BR; ++r) max_pos = max(max_pos, row_pos[r]);
  const uint kv_end = uint(max_pos + 1);

  for (uint j0 = 0; j0 < kv_end; j0 += BC) {
    for (uint i = lane; i < BC * D4; i += n_lanes) {
      const uint kk = i / D4, d4 = i - kk * D4, j = j0 + kk;
      const bool in_range = j < kv_end;
      ks[i] = f16vec4(in_range ? k_cache[j * kv_stride4 + g * D4 + d4] : vec4(0.0));
      vs[i] = f16vec4(in_range ? v_cache[j * kv_stride4 + g * D4 + d4] : vec4(0.0));
    }
    barrier();
    for (uint c = 0; c < BC / 16; ++c) {
      FRAG_C s = FRAG_C(0.0);
      for (uint d0 = 0; d0 < D; d0 += 16) {
        // Q's fragment is re-read from shared memory rather than kept in an array of fragments: the H100 driver
        // spills arrays of cooperative matrices indexed in loops (see matmul_coopmat.comp).
        FRAG_A qf;
        FRAG_B kf;
        coopMatLoad(qf, qs, d0, D, gl_CooperativeMatrixLayoutRowMajor);
        coopMatLoad(kf, ks, (c * 16 * D + d0) / 4, D4, gl_CooperativeMatrixLayoutColumnMajor);
        s = coopMatMulAdd(qf, kf, s);
      }
      coopMatStore(s, ss, c * 16, BC, gl_CooperativeMatrixLayoutRowMajor);
    }
    barrier();
    if (lane < BR) {
      const int pos = row_pos[lane];
      const float m_old = row_m[lane];
      float m_new = m_old;
      for (uint kk = 0; kk < BC; ++kk)
        if (int(j0 + kk) <= pos) m_new = max(m_new, ss[lane * BC + kk] * pc.scale);
      float sum = 0.0;
      for (uint kk = 0; kk < BC; ++kk) {
        const float p = int(j0 + kk) <= pos ? exp(ss[lane * BC + kk] * pc.scale - m_new) : 0.0;
        ps[lane * BC + kk] = float16_t(p);
        sum += p;
      }
      const float corr = m_old == m_new ? 1.0 : exp(m_old - m_new);  // also 1 while the row has seen no key
      row_corr[lane] = corr;
      row_l[lane] = row_l[lane] * corr + sum;
      row_m[lane] = m_new;
    }
    barrier();
    for (uint dc = 0; dc < D / 16; ++dc) {
      FRAG_C acc = FRAG_C(0.0);
      for (uint kc = 0; kc < BC / 16; ++kc) {
        FRAG_A pf;
        FRAG_B vf;
        coopMatLoad(pf, ps, kc * 16, BC, gl_CooperativeMatrixLayoutRowMajor);
        coopMatLoad(vf, vs, (kc * 16 * D + dc * 16) / 4, D4, gl_CooperativeMatrixLayoutRowMajor);
        acc = coopMatMulAdd(pf, vf, acc);
      }
      coopMatStore(acc, otmp, dc * 4, D4, gl_CooperativeMatrixLayoutRowMajor);
    }
    barrier();
    for (uint i = lane; i < BR * D4; i += n_lanes) os[i] = os[i] * row_corr[i / D4] + otmp[i];
    barrier();
  }

  for (uint i = lane; i < BR * D; i += n_lanes) {
    const uint r = i / D, d = i - r * D, t = t0 + r;
    if (t < pc.n_tokens) o[(t * pc.n_heads + h) * D + d] = os[i / 4][i % 4] / row_l[r];
  }
}
