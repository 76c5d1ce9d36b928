#version 450
// Causal prefill attention on cooperative matrices (VK_KHR_cooperative_matrix 16x16x16, f16 operands, f32
// accumulation), flash-attention form: the same contract as attention.comp for head dims that are multiples of 16
// and at most 128.
//
// A workgroup of WARPS subgroups (spec constant 1; local size = WARPS * the subgroup size, spec constant 0) owns
// 16 * WARPS consecutive query tokens of one head h (KV head g = h / (n_heads / n_kv_heads)); subgroup w owns the 16
// rows 16w .. 16w + 15. Q is converted to f16 once and kept in D/16 named A-fragments per subgroup. Keys and values
// are visited in blocks of 32, staged as f16 in shared memory by the whole workgroup (row-major [key][dim], so K
// read column-major is K^T): the staging, the largest cost per block, is shared by the WARPS subgroups. Per block
// and subgroup:
//   S (16 x 32) = Q K^T                       2 accumulators, D/16 steps each  -> shared, f32
//   online softmax, two invocations per query row (16 keys each, combined with a shuffle): causal mask
//     key > positions[t] -> -inf, running max m and denominator l, P = exp(S - m_new) as f16 -> shared,
//     correction exp(m_old - m_new)
//   O (16 x D, f32 in shared) = O * correction + P V, one 16-column slice at a time through a 16 x 16 scratch tile
// and finally out = O / l. Rows past n_tokens are computed with everything masked and never written.
// Shared memory at D = 128, WARPS = 2: K and V 16 KiB, S 4 KiB, P 2 KiB, O 16 KiB, scratch 2 KiB (the host checks
// the device's limit); Q is staged through the K tile before the loop.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint WARPS = 2;
layout(binding = 0) readonly buffer Q { vec4 q4[]; };       // D % 16 == 0: rows start on a vec4
layout(binding = 1) readonly buffer K { vec4 k_cache[]; };
layout(binding = 2) readonly buffer V { vec4 v_cache[]; };
layout(binding = 3) readonly buffer Positions { int positions[]; };
layout(binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push {
  uint n_tokens; uint n_heads; uint n_kv_heads; uint head_dim; uint head_dim_v; float scale;
} pc;

const uint BR = 16;     // query rows per subgroup
const uint BC = 32;     // keys per block
const uint MAX_D = 128;
shared f16vec4 ks[BC * MAX_D / 4];  // fragment offsets and strides in f16vec4 units; also stages Q (WARPS <= 2)
shared f16vec4 vs[BC * MAX_D / 4];
shared float ss[WARPS * BR * BC];
shared float16_t ps[WARPS * BR * BC];
shared vec4 os[WARPS * BR * MAX_D / 4];
shared float scratch[WARPS * 256];
shared float row_m[WARPS * BR], row_l[WARPS * BR], row_corr[WARPS * BR];
shared int row_pos[WARPS * BR];

#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define FRAG_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// Q's fragments are named variables (see matmul_coopmat.comp: arrays of fragments are slow on the H100 driver).
#define Q_LOAD(c) if (16 * c < D) coopMatLoad(qf##c, ks, (w * BR * D + 16 * c) / 4, D4, gl_CooperativeMatrixLayoutRowMajor);
#define QK(c)                                                                                               \
  if (16 * c < D) {                                                                                          \
    FRAG_B kf;                                                                                               \
    coopMatLoad(kf, ks, (kc * 16 * D + 16 * c) / 4, D4, gl_CooperativeMatrixLayoutColumnMajor);              \
    s = coopMatMulAdd(qf##c, kf, s);                                                                         \
  }

void sync_subgroup() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint w = gl_SubgroupID, lane = gl_SubgroupInvocationID, n_lanes = gl_SubgroupSize;
  const uint D = pc.head_dim;  // == head_dim_v, checked by the host
  const uint D4 = D / 4, kv_stride4 = pc.n_kv_heads * D4;
  const uint rows = WARPS * BR;
  const uint h = gl_WorkGroupID.x % pc.n_heads, t0 = (gl_WorkGroupID.x / pc.n_heads) * rows;
  const uint g = h / (pc.n_heads / pc.n_kv_heads);
  const uint r0 = w * BR;  // this subgroup's first row in the per-workgroup arrays

  // Stage Q (f16, through the K tile), clear O, set up the rows.
  for (uint i = tid; i < rows * D4; i += wg) {
    const uint r = i / D4, d4 = i - r * D4, t = t0 + r;
    ks[i] = f16vec4(t < pc.n_tokens ? q4[(t * pc.n_heads + h) * D4 + d4] : vec4(0.0));
  }
  for (uint i = tid; i < rows * D4; i += wg) os[i] = vec4(0.0);
  for (uint r = tid; r < rows; r += wg) {
    const uint t = t0 + r;
    row_pos[r] = t < pc.n_tokens ? positions[t] : -1;
    row_m[r] = -1.0 / 0.0;
    row_l[r] = 0.0;
  }
  barrier();
  FRAG_A qf0, qf1, qf2, qf3, qf4, qf5, qf6, qf7;
  Q_LOAD(0) Q_LOAD(1) Q_LOAD(2) Q_LOAD(3) Q_LOAD(4) Q_LOAD(5) Q_LOAD(6) Q_LOAD(7)
  int max_pos = -1;
  for (uint r = 0; r < rows; ++r) max_pos = max(max_pos, row_pos[r]);
  const uint kv_end = uint(max_pos + 1);
  barrier();  // Q is in registers before the K tile is overwritten

  // Softmax lanes: invocations 2r and 2r + 1 of the subgroup (at least 32 invocations, checked by the host) take
  // keys 0..15 and 16..31 of row r and combine their max and sum with a shuffle.
  for (uint j0 = 0; j0 < kv_end; j0 += BC) {
    for (uint i = tid; i < BC * D4; i += wg) {
      const uint kk = i / D4, d4 = i - kk * D4, j = j0 + kk;
      const bool in_range = j < kv_end;
      ks[i] = f16vec4(in_range ? k_cache[j * kv_stride4 + g * D4 + d4] : vec4(0.0));
      vs[i] = f16vec4(in_range ? v_cache[j * kv_stride4 + g * D4 + d4] : vec4(0.0));
    }
    barrier();
    [[unroll]] for (uint kc = 0; kc < BC / 16; ++kc) {
      FRAG_C s = FRAG_C(0.0);
      QK(0) QK(1) QK(2) QK(3) QK(4) QK(5) QK(6) QK(7)
      coopMatStore(s, ss, w * BR * BC + kc * 16, BC, gl_CooperativeMatrixLayoutRowMajor);
    }
    sync_subgroup();
    if (lane < 2 * BR) {
      const uint r = lane / 2, half_ = lane % 2, row = r0 + r;
      const int pos = row_pos[row];
      const float m_old = row_m[row];
      float m_new = m_old;
      for (uint kk = 16 * half_; kk < 16 * half_ + 16; ++kk)
        if (int(j0 + kk) <= pos) m_new = max(m_new, ss[row * BC + kk] * pc.scale);
      m_new = max(m_new, subgroupShuffleXor(m_new, 1));
      float sum = 0.0;
      for (uint kk = 16 * half_; kk < 16 * half_ + 16; ++kk) {
        const float p = int(j0 + kk) <= pos ? exp(ss[row * BC + kk] * pc.scale - m_new) : 0.0;
        ps[row * BC + kk] = float16_t(p);
        sum += p;
      }
      sum += subgroupShuffleXor(sum, 1);
      if (half_ == 0) {
        const float corr = m_old == m_new ? 1.0 : exp(m_old - m_new);  // also 1 while the row has seen no key
        row_corr[row] = corr;
        row_l[row] = row_l[row] * corr + sum;
        row_m[row] = m_new;
      }
    }
    sync_subgroup();
    for (uint dc = 0; dc < D / 16; ++dc) {
      FRAG_C acc = FRAG_C(0.0);
      [[unroll]] for (uint kc = 0; kc < BC / 16; ++kc) {
        FRAG_A pf;
        FRAG_B vf;
        coopMatLoad(pf, ps, w * BR * BC + kc * 16, BC, gl_CooperativeMatrixLayoutRowMajor);
        coopMatLoad(vf, vs, (kc * 16 * D + dc * 16) / 4, D4, gl_CooperativeMatrixLayoutRowMajor);
        acc = coopMatMulAdd(pf, vf, acc);
      }
      coopMatStore(acc, scratch, w * 256, 16, gl_CooperativeMatrixLayoutRowMajor);
      sync_subgroup();
      for (uint e = lane; e < 64; e += n_lanes) {  // 16 rows x 4 vec4 of this column slice
        const uint r = e / 4, c4 = e % 4, at = (r0 + r) * D4 + dc * 4 + c4;
        const vec4 pv = vec4(scratch[w * 256 + r * 16 + 4 * c4], scratch[w * 256 + r * 16 + 4 * c4 + 1],
                             scratch[w * 256 + r * 16 + 4 * c4 + 2], scratch[w * 256 + r * 16 + 4 * c4 + 3]);
        os[at] = os[at] * row_corr[r0 + r] + pv;
      }
      sync_subgroup();
    }
    barrier();  // every subgroup is done with this block's K and V
  }

  for (uint i = tid; i < rows * D; i += wg) {
    const uint r = i / D, d = i - r * D, t = t0 + r;
    if (t < pc.n_tokens) o[(t * pc.n_heads + h) * D + d] = os[i / 4][i % 4] / row_l[r];
  }
}
