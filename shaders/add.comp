#version 450
// Elementwise add: c[i] = a[i] + b[i] for i < count. T is the element type of the variant (float, or float16_t with
// FLOAT16 defined, which needs shaderFloat16 and 16-bit storage). Workgroup size x is specialization constant 0;
// grid-stride loop (see fill.comp).
#ifdef FLOAT16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifndef T
#error "T (the element type) must be defined"
#endif
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer A { T a[]; };
layout(binding = 1) readonly buffer B { T b[]; };
layout(binding = 2) writeonly buffer C { T c[]; };
layout(push_constant) uniform Push { uint count; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) c[i] = a[i] + b[i];
}
