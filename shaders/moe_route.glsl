// Mixture-of-experts routing of one token (engine::MoeRouteOp), shared by moe_route.comp and the router matvec that
// routes in its last workgroup (matvec.comp's ROUTE): the k experts of largest router logit in order (ties to the
// lower expert id), and their gating weights in f32:
//   ROUTE_GATING 0 (SoftmaxTopK, qwen3moe)  p = softmax over all n_experts logits; weight_s = p[expert_s]
//   ROUTE_GATING 1 (TopKSoftmax, gpt-oss)   weight_s = softmax over the k chosen logits
// then, with normalize, weight_s /= max(sum of the k weights, 6.103515625e-5) (llama.cpp's clamp).
//
// The token's logits go to shared memory (NaN as -inf, so the order below is total), then each invocation ranks its
// experts e = tid, tid + WG, ... in one pass over them all: rank(e) = #{j : l_j > l_e, or l_j == l_e and j < e}
// (logit descending, ties to the lower id), and the expert of rank s < k is selection s. No barrier per selection: a
// decode step routes one token, and k rounds of workgroup-wide argmax cost about 10 microseconds per layer on the
// H200 (a single invocation walking k * n_experts logits, 30).
//
// The includer declares, before including this file:
//   const uint ROUTE_GATING (a spec constant);  float route_logit(uint i)  (element i of the logits);
//   writeonly buffers route_experts[] (int) and route_weights[] (float), [n_tokens, k].
// Every invocation of the workgroup calls route_token (it has barriers); it leaves shared memory free to reuse.

const uint ROUTE_MAX_K = 32;         // the host checks k <= ROUTE_MAX_K
const uint ROUTE_MAX_EXPERTS = 512;  // and n_experts <= ROUTE_MAX_EXPERTS
const uint ROUTE_MAX_SUBGROUPS = 64;

shared float route_logit_s[ROUTE_MAX_EXPERTS];
shared float route_sub_value[ROUTE_MAX_SUBGROUPS];
shared uint route_chosen[ROUTE_MAX_K];
shared float route_chosen_logit[ROUTE_MAX_K];
shared float route_sum;

void route_token(uint t, uint n_experts, uint k, bool normalize) {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint base = t * n_experts;
  for (uint e = tid; e < n_experts; e += wg) {
    const float l = route_logit(base + e);
    route_logit_s[e] = isnan(l) ? -1.0 / 0.0 : l;
  }
  barrier();
  for (uint e = tid; e < n_experts; e += wg) {
    const float l = route_logit_s[e];
    uint rank = 0;
    for (uint j = 0; j < n_experts; ++j) {
      const float lj = route_logit_s[j];
      rank += (lj > l || (lj == l && j < e)) ? 1u : 0u;
    }
    if (rank < k) {
      route_chosen[rank] = e;
      route_chosen_logit[rank] = l;
    }
  }
  barrier();
  if (ROUTE_GATING == 0) {  // softmax over all logits: the largest is selection 0's; the sum of exponentials
    float sum = 0.0;
    for (uint e = tid; e < n_experts; e += wg) sum += exp(route_logit_s[e] - route_chosen_logit[0]);
    sum = subgroupAdd(sum);
    if (subgroupElect()) route_sub_value[gl_SubgroupID] = sum;
    barrier();
    if (tid == 0) {
      float v = 0.0;
      for (uint i = 0; i < gl_NumSubgroups; ++i) v += route_sub_value[i];
      route_sum = v;
    }
    barrier();
  }
  if (tid == 0) {
    float w[ROUTE_MAX_K];
    if (ROUTE_GATING == 0) {
      for (uint s = 0; s < k; ++s) w[s] = exp(route_chosen_logit[s] - route_chosen_logit[0]) / route_sum;
    } else {
      const float m = route_chosen_logit[0];  // the largest
      float sum = 0.0;
      for (uint s = 0; s < k; ++s) sum += exp(route_chosen_logit[s] - m);
      for (uint s = 0; s < k; ++s) w[s] = exp(route_chosen_logit[s] - m) / sum;
    }
    float denom = 1.0;
    if (normalize) {
      float sum = 0.0;
      for (uint s = 0; s < k; ++s) sum += w[s];
      denom = max(sum, 6.103515625e-5);
    }
    for (uint s = 0; s < k; ++s) {
      route_experts[t * k + s] = int(route_chosen[s]);
      route_weights[t * k + s] = normalize ? w[s] / denom : w[s];
    }
  }
  barrier();  // the next token's logits overwrite route_logit_s
}
