#version 450
// Fills a buffer of 32-bit words with a value: dst[i] = value for i < count.
// Workgroup size x is specialization constant 0. Grid-stride loop: any count works with a capped group count
// (pipelines.h: group_count), so maxComputeWorkGroupCount never limits the buffer size.
layout(local_size_x_id = 0) in;
layout(binding = 0) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Push { uint count; uint value; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.count; i += stride) dst[i] = pc.value;
}
