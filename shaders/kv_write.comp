#version 450
// KV-cache append into the paged cache: cache[rows[t], :] = src[t, :] for t < n_tokens, rows of `width` elements
// (rows[] is the step's KvRows: each token's cache row, engine/plan.h). The cache is f32, or f16 with CACHE_F16
// (converted by the device's f32 -> f16 conversion, round to nearest even on the devices GRETA targets). Grid-stride
// loop over the n_tokens * width elements.
// VEC4 (width % 4 == 0, the host checks): four elements per invocation, one 16-byte load and one 16-byte (f32) or
// 8-byte (f16: two packHalf2x16 words) store; 2-byte stores of single halves took twice the f32 write's time on the
// H200 (7B pp512: 1.34 ms against 0.70 ms for all layers).
#if defined(CACHE_F16) && !defined(VEC4)
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0) in;
layout(binding = 2) readonly buffer Rows { int rows[]; };
layout(push_constant) uniform Push { uint n_tokens; uint width; } pc;
#ifdef VEC4
layout(binding = 0) readonly buffer Src { vec4 src[]; };
#ifdef CACHE_F16
layout(binding = 1) writeonly buffer Cache { uvec2 cache[]; };
#define STORE(v) uvec2(packHalf2x16((v).xy), packHalf2x16((v).zw))
#else
layout(binding = 1) writeonly buffer Cache { vec4 cache[]; };
#define STORE(v) (v)
#endif
void main() {
  const uint width4 = pc.width / 4, count = pc.n_tokens * width4;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
    const uint t = i / width4, c = i - t * width4;
    cache[uint(rows[t]) * width4 + c] = STORE(src[i]);
  }
}
#else
#ifdef CACHE_F16
#define CACHE_T float16_t
#else
#define CACHE_T float
#endif
layout(binding = 0) readonly buffer Src { float src[]; };
layout(binding = 1) writeonly buffer Cache { CACHE_T cache[]; };
void main() {
  const uint count = pc.n_tokens * pc.width;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
    const uint t = i / pc.width, c = i - t * pc.width;
    cache[uint(rows[t]) * pc.width + c] = CACHE_T(src[i]);
  }
}
#endif
