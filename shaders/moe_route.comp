#version 450
// Mixture-of-experts routing (engine::MoeRouteOp): the k experts of largest router logit in order (ties to the lower
// expert id), and their gating weights in f32:
//   GATING 0 (SoftmaxTopK, qwen3moe)  p = softmax over all n_experts logits; weight_s = p[expert_s]
//   GATING 1 (TopKSoftmax, gpt-oss)   weight_s = softmax over the k chosen logits
// then, with normalize, weight_s /= max(sum of the k weights, 6.103515625e-5) (llama.cpp's clamp).
//
// One workgroup per token (grid-stride over tokens): the token's logits go to shared memory (NaN as -inf, so the
// order below is total), then each invocation ranks its experts e = tid, tid + WG, ... in one pass over them all:
// rank(e) = #{j : l_j > l_e, or l_j == l_e and j < e} (logit descending, ties to the lower id), and the expert of rank
// s < k is selection s. No barrier per selection: a decode step routes one token, and k rounds of workgroup-wide
// argmax cost about 10 microseconds per layer on the H200 (a single invocation walking k * n_experts logits, 30).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint GATING = 0;
layout(binding = 0) readonly buffer Logits { float logits[]; };     // [n_tokens, n_experts]
layout(binding = 1) writeonly buffer Experts { int experts[]; };    // [n_tokens, k]
layout(binding = 2) writeonly buffer Weights { float weights[]; };  // [n_tokens, k]
layout(push_constant) uniform Push { uint n_tokens; uint n_experts; uint k; uint normalize; } pc;

const uint MAX_K = 32;          // the host checks k <= MAX_K
const uint MAX_EXPERTS = 512;   // and n_experts <= MAX_EXPERTS
const uint MAX_SUBGROUPS = 64;
const float NEG_INF = -1.0 / 0.0;

shared float s_logit[MAX_EXPERTS];
shared float s_sub_value[MAX_SUBGROUPS];
shared uint s_chosen[MAX_K];
shared float s_chosen_logit[MAX_K];
shared float s_sum;

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  for (uint t = gl_WorkGroupID.x; t < pc.n_tokens; t += gl_NumWorkGroups.x) {
    const uint base = t * pc.n_experts;
    for (uint e = tid; e < pc.n_experts; e += wg) {
      const float l = logits[base + e];
      s_logit[e] = isnan(l) ? NEG_INF : l;
    }
    barrier();
    for (uint e = tid; e < pc.n_experts; e += wg) {
      const float l = s_logit[e];
      uint rank = 0;
      for (uint j = 0; j < pc.n_experts; ++j) {
        const float lj = s_logit[j];
        rank += (lj > l || (lj == l && j < e)) ? 1u : 0u;
      }
      if (rank < pc.k) {
        s_chosen[rank] = e;
        s_chosen_logit[rank] = l;
      }
    }
    barrier();
    if (GATING == 0) {  // softmax over all logits: the largest is selection 0's; the sum of exponentials
      float sum = 0.0;
      for (uint e = tid; e < pc.n_experts; e += wg) sum += exp(s_logit[e] - s_chosen_logit[0]);
      sum = subgroupAdd(sum);
      if (subgroupElect()) s_sub_value[gl_SubgroupID] = sum;
      barrier();
      if (tid == 0) {
        float v = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; ++i) v += s_sub_value[i];
        s_sum = v;
      }
      barrier();
    }
    if (tid == 0) {
      float w[MAX_K];
      if (GATING == 0) {
        for (uint s = 0; s < pc.k; ++s) w[s] = exp(s_chosen_logit[s] - s_chosen_logit[0]) / s_sum;
      } else {
        const float m = s_chosen_logit[0];  // the largest
        float sum = 0.0;
        for (uint s = 0; s < pc.k; ++s) sum += exp(s_chosen_logit[s] - m);
        for (uint s = 0; s < pc.k; ++s) w[s] = exp(s_chosen_logit[s] - m) / sum;
      }
      float denom = 1.0;
      if (pc.normalize != 0) {
        float sum = 0.0;
        for (uint s = 0; s < pc.k; ++s) sum += w[s];
        denom = max(sum, 6.103515625e-5);
      }
      for (uint s = 0; s < pc.k; ++s) {
        experts[t * pc.k + s] = int(s_chosen[s]);
        weights[t * pc.k + s] = pc.normalize != 0 ? w[s] / denom : w[s];
      }
    }
    barrier();  // the next token's logits overwrite s_logit
  }
}
