#version 450
// Mixture-of-experts routing (engine::MoeRouteOp), one invocation per token (grid-stride): the k experts of largest
// router logit in order (ties to the lower expert id), and their gating weights in f32:
//   GATING 0 (SoftmaxTopK, qwen3moe)  p = softmax over all n_experts logits; weight_s = p[expert_s]
//   GATING 1 (TopKSoftmax, gpt-oss)   weight_s = softmax over the k chosen logits
// then, with normalize, weight_s /= max(sum of the k weights, 6.103515625e-5) (llama.cpp's clamp).
// Selection s is the largest logit among the experts that come after selection s - 1 in the order (logit
// descending, id ascending): a strictly-greater scan in id order, with no mask. O(k * n_experts) per token, which
// is small next to the expert matmuls (128 experts, k = 8: 1024 comparisons).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint GATING = 0;
layout(binding = 0) readonly buffer Logits { float logits[]; };     // [n_tokens, n_experts]
layout(binding = 1) writeonly buffer Experts { int experts[]; };    // [n_tokens, k]
layout(binding = 2) writeonly buffer Weights { float weights[]; };  // [n_tokens, k]
layout(push_constant) uniform Push { uint n_tokens; uint n_experts; uint k; uint normalize; } pc;

const uint MAX_K = 32;  // the host checks k <= MAX_K

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint t = gl_GlobalInvocationID.x; t < pc.n_tokens; t += stride) {
    const uint base = t * pc.n_experts;
    uint chosen[MAX_K];
    float chosen_logit[MAX_K];
    float prev_l = 1.0 / 0.0;
    uint prev_e = 0;
    for (uint s = 0; s < pc.k; ++s) {
      float best = -1.0 / 0.0;
      uint best_e = 0xFFFFFFFFu;
      for (uint e = 0; e < pc.n_experts; ++e) {
        const float l = logits[base + e];
        const bool after = s == 0 || l < prev_l || (l == prev_l && e > prev_e);
        if (after && (best_e == 0xFFFFFFFFu || l > best)) {
          best = l;
          best_e = e;
        }
      }
      chosen[s] = best_e;
      chosen_logit[s] = best;
      prev_l = best;
      prev_e = best_e;
    }
    float w[MAX_K];
    if (GATING == 0) {
      float m = -1.0 / 0.0;
      for (uint e = 0; e < pc.n_experts; ++e) m = max(m, logits[base + e]);
      float sum = 0.0;
      for (uint e = 0; e < pc.n_experts; ++e) sum += exp(logits[base + e] - m);
      for (uint s = 0; s < pc.k; ++s) w[s] = exp(chosen_logit[s] - m) / sum;
    } else {
      const float m = chosen_logit[0];  // the largest
      float sum = 0.0;
      for (uint s = 0; s < pc.k; ++s) sum += exp(chosen_logit[s] - m);
      for (uint s = 0; s < pc.k; ++s) w[s] = exp(chosen_logit[s] - m) / sum;
    }
    float denom = 1.0;
    if (pc.normalize != 0) {
      float sum = 0.0;
      for (uint s = 0; s < pc.k; ++s) sum += w[s];
      denom = max(sum, 6.103515625e-5);
    }
    for (uint s = 0; s < pc.k; ++s) {
      experts[t * pc.k + s] = int(chosen[s]);
      weights[t * pc.k + s] = pc.normalize != 0 ? w[s] / denom : w[s];
    }
  }
}
