#version 450
// KV-cache append into the paged cache: cache[rows[t], :] = src[t, :] for t < n_tokens, rows of `width` elements
// (rows[] is the step's KvRows: each token's cache row, engine/plan.h). The cache is f32, or f16 with CACHE_F16
// (converted by the device's f32 -> f16 conversion, round to nearest even on the devices GRETA targets). Grid-stride
// loop over the n_tokens * width elements.
// VEC4 (width % 4 == 0, the host checks): four elements per invocation, one 16-byte load and one 16-byte (f32) or
// 8-byte (f16: two packHalf2x16 words) store; 2-byte stores of single halves took twice the f32 write's time on the
// H200 (7B pp512: 1.34 ms against 0.70 ms for all layers).
// CACHE_Q8 (width % 32 == 0, the host checks): the Q8_0 cache of engine/kv_q8.h, a flat array of blocks of 32
// elements, 9 words each (words 0..7: the int8 values, element 4w + b of the block in byte b of word w; word 8: the
// f32 scale d; value = d * q). Row r's element c lies in block (r * width + c) / 32. One invocation per block of a
// token's row (8 vec4 loads, 9 word stores), quantized as kv_q8_quantize does (q8_scale, q8_inverse, q8_round).
#if defined(CACHE_F16) && !defined(VEC4)
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0) in;
layout(binding = 2) readonly buffer Rows { int rows[]; };
layout(push_constant) uniform Push { uint n_tokens; uint width; } pc;
#if defined(CACHE_Q8)
layout(binding = 0) readonly buffer Src { vec4 src[]; };
layout(binding = 1) writeonly buffer Cache { uint cache[]; };
// The int8 of one value as kv_q8_quantize rounds it (std::lround: halves away from zero). v - trunc(v) is exact, so
// unlike floor(|v| + 0.5) no sum rounds up a value just below a half.
// (`precise`: v - t is not fused with the product x * id that made v.)
int q8_round(float v) {
  const float t = trunc(v);
  precise float frac = abs(v - t);
  return int(t) + (frac >= 0.5 ? int(sign(v)) : 0);
}
// d = amax / 127 and id = 1 / d correctly rounded, as the host's f32 divisions are: a shader's division may be off
// (SPIR-V allows 2.5 ulp; the H200's driver was seen 1 ulp off, which moves an int8 across a rounding tie now and
// then). `precise` keeps each fma() fused. d: Markstein's correction of amax * RN(1/127) (checked exhaustively over
// f32 mantissas: always the correctly rounded quotient). id: one Newton step from 1 / d, then the nearest of it and
// its two neighbours by their exact residuals 1 - d * y (checked exhaustively from starting errors up to 3 ulp).
float q8_scale(float amax) {
  const float r = uintBitsToFloat(0x3c010204u);  // RN(1 / 127)
  precise float q0 = amax * r;
  precise float rem = fma(-q0, 127.0, amax);
  precise float d = fma(rem, r, q0);
  return d;
}
float q8_inverse(float d) {  // d > 0
  precise float y0 = 1.0 / d;
  precise float e = fma(-d, y0, 1.0);
  precise float y = fma(e, y0, y0);
  const float lo = uintBitsToFloat(floatBitsToUint(y) - 1u), hi = uintBitsToFloat(floatBitsToUint(y) + 1u);
  precise float r = abs(fma(-d, y, 1.0)), r_lo = abs(fma(-d, lo, 1.0)), r_hi = abs(fma(-d, hi, 1.0));
  return r_lo < r ? (r_hi < r_lo ? hi : lo) : (r_hi < r ? hi : y);
}
uint q8_pack(vec4 x, float id) {
  precise vec4 v = x * id;  // rounded to f32 as the host's x * id
  const ivec4 q = ivec4(q8_round(v.x), q8_round(v.y), q8_round(v.z), q8_round(v.w));
  return uint(q.x & 0xff) | (uint(q.y & 0xff) << 8) | (uint(q.z & 0xff) << 16) | (uint(q.w & 0xff) << 24);
}
void main() {
  const uint blocks = pc.width / 32, count = pc.n_tokens * blocks;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
    const uint t = i / blocks, b = i - t * blocks;
    vec4 x[8];
    float amax = 0.0;
    for (uint w = 0; w < 8; ++w) {
      x[w] = src[8 * i + w];  // token t's block b: src vec4s 8 (t * blocks + b) ..
      const vec4 a = abs(x[w]);
      amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    const float d = q8_scale(amax), id = d != 0.0 ? q8_inverse(d) : 0.0;
    const uint at = (uint(rows[t]) * blocks + b) * 9;
    for (uint w = 0; w < 8; ++w) cache[at + w] = q8_pack(x[w], id);
    cache[at + 8] = floatBitsToUint(d);
  }
}
#elif defined(VEC4)
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
