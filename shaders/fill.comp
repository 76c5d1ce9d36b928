#version 450
// Fills a buffer of 32-bit words with a value. Workgroup size is a specialization constant (id 0).
layout(local_size_x_id = 0) in;
layout(binding = 0) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Push { uint count; uint value; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < pc.count) dst[i] = pc.value;
}
