#version 450
// Lab kernel for vk_alu_bench's residency table: how many workgroups of one size and shared-memory footprint a
// device keeps running at once (occupancy, which a Vulkan driver does not report). Each workgroup counts itself in
// (counters[0]) and records the most counted in at once (counters[1]), works for a while (a dependent chain of f32
// multiply-adds through its shared array, so that the array is really allocated), then counts itself out.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SHARED_WORDS = 1;
layout(binding = 0) coherent buffer Counters { uint counters[]; };  // zero before the dispatch
layout(binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint iterations; } pc;
shared float scratch[SHARED_WORDS];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  if (tid == 0u) atomicMax(counters[1], atomicAdd(counters[0], 1u) + 1u);
  for (uint i = tid; i < SHARED_WORDS; i += gl_WorkGroupSize.x) scratch[i] = float(i & 7u);
  barrier();
  float acc = float(gl_GlobalInvocationID.x & 255u);
  for (uint it = 0; it < pc.iterations; ++it) acc = fma(acc, 0.5, scratch[(tid * 33u + it) % SHARED_WORDS]);
  barrier();
  if (tid == 0u) atomicAdd(counters[0], 0xFFFFFFFFu);
  result[gl_GlobalInvocationID.x] = acc;
}
