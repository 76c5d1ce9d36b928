#version 450
// KV-cache append into the paged cache: cache[rows[t], :] = src[t, :] for t < n_tokens, rows of `width` elements
// (rows[] is the step's KvRows: each token's cache row, engine/plan.h). The cache is f32, or f16 with CACHE_F16
// (converted by the device's f32 -> f16 conversion, round to nearest even on the devices GRETA targets; 16-bit storage
// only, no f16 arithmetic). Grid-stride loop over the n_tokens * width elements.
#ifdef CACHE_F16
#extension GL_EXT_shader_16bit_storage : require
#define CACHE_T float16_t
#else
#define CACHE_T float
#endif
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer Src { float src[]; };
layout(binding = 1) writeonly buffer Cache { CACHE_T cache[]; };
layout(binding = 2) readonly buffer Rows { int rows[]; };
layout(push_constant) uniform Push { uint n_tokens; uint width; } pc;
void main() {
  const uint count = pc.n_tokens * pc.width;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
    const uint t = i / pc.width, c = i - t * pc.width;
    cache[uint(rows[t]) * pc.width + c] = CACHE_T(src[i]);
  }
}
