// The gated linear units' activations (engine::GluKind), shared by glu.comp and the kernels that take a GLU as their
// fused input (matvec.comp, matvec_block.comp, quantize_q8.comp: the backend's decode fusions).
//   SiLU       silu(g) * u, silu(g) = g / (1 + exp(-g))                                      (llama, qwen, phi3)
//   SwiGluOai  x = min(g, limit), y = clamp(u, -limit, limit): x / (1 + exp(-alpha x)) * (y + 1)     (gpt-oss)
float glu_silu(float g, float u) { return g / (1.0 + exp(-g)) * u; }
vec4 glu_silu(vec4 g, vec4 u) { return g / (1.0 + exp(-g)) * u; }
float glu_oai(float g, float u, float alpha, float limit) {
  const float x = min(g, limit), y = clamp(u, -limit, limit);
  return x / (1.0 + exp(-alpha * x)) * (y + 1.0);
}
vec4 glu_oai(vec4 g, vec4 u, float alpha, float limit) {
  const vec4 x = min(g, limit), y = clamp(u, -limit, limit);
  return x / (1.0 + exp(-alpha * x)) * (y + 1.0);
}
