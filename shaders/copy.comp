#version 450
// Copies `count` elements: dst[i] = src[i]. ELEM is the element type chosen per variant (shaders.cmake): uint for
// word-granular copies, uvec4 for 16-byte loads/stores (bandwidth). Workgroup size x is specialization constant 0;
// grid-stride loop (see fill.comp).
#ifndef ELEM
#error "ELEM (the element type) must be defined"
#endif
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Src { ELEM src[]; };
layout(binding = 1) writeonly buffer Dst { ELEM dst[]; };
layout(push_constant) uniform Push { uint count; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) dst[i] = src[i];
}
