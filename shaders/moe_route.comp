#version 450
// Mixture-of-experts routing (engine::MoeRouteOp), one workgroup per token (grid-stride over tokens): moe_route.glsl.
// Decode steps route inside the router's matvec instead (matvec.comp's ROUTE; src/vk/backend/fusion.h).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROUTE_GATING = 0;
layout(binding = 0) readonly buffer Logits { float logits[]; };        // [n_tokens, n_experts]
layout(binding = 1) writeonly buffer Experts { int route_experts[]; };  // [n_tokens, k]
layout(binding = 2) writeonly buffer Weights { float route_weights[]; };  // [n_tokens, k]
layout(push_constant) uniform Push { uint n_tokens; uint n_experts; uint k; uint normalize; } pc;

float route_logit(uint i) { return logits[i]; }
#include "moe_route.glsl"

void main() {
  for (uint t = gl_WorkGroupID.x; t < pc.n_tokens; t += gl_NumWorkGroups.x)
    route_token(t, pc.n_experts, pc.k, pc.normalize != 0);
}
