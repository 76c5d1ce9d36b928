// int8 activation rows: what quantize_q8.comp and attention_decode.comp (Q8_OUT) write and matvec_block.comp (X_Q8)
// reads. A token row of `cols` elements (cols % 32 == 0) takes 9 * cols / 32 words:
//   words [0, cols / 4)             the codes, 4 per word in element order (byte i of word g = element 4g + i)
//   words [cols / 4, 9 * cols / 32)  one f32 scale d per 32-element block (element ~ d * code)
// A block's codes: d = max |a| / 127, code = roundEven(a * 127 / max |a|), all 0 for an all-zero block.

// The row's first word.
uint q8_row_base(uint row, uint cols) { return row * (cols >> 5) * 9u; }
// The word (from the row's first) holding the scale of 4-element group g's block.
uint q8_scale_word(uint cols, uint g) { return (cols >> 2) + (g >> 3); }
// The codes of the 4 elements `a` of a block whose largest magnitude is `block_max`, packed into one word.
uint q8_pack(vec4 a, float block_max) {
  const float inv = block_max > 0.0 ? 127.0 / block_max : 0.0;
  const uvec4 c = uvec4(clamp(ivec4(roundEven(a * inv)), ivec4(-127), ivec4(127))) & 0xFFu;
  return c.x | (c.y << 8) | (c.z << 16) | (c.w << 24);
}
// The block's scale d, as stored.
uint q8_scale_bits(float block_max) { return floatBitsToUint(block_max / 127.0); }

// Integer sums of int8 products as scaled floats without a conversion instruction (conversions issue on a narrower
// pipe than fma on NVIDIA's SMs): an integer sum i (|i| < 2^22) started at Q8_FLOAT_BIAS holds the bits of the float
// 1.5 * 2^23 + i, exactly (the ulp there is 1), and q8_biased_scaled makes i s of it in one fma, (1.5 * 2^23 + i) s -
// 1.5 * 2^23 s, given unbias_s = Q8_UNBIAS * s. Where s has at most 22 significant bits (an f16 scale times an integer
// of up to 8 bits: the weights' block scales), unbias_s is exact and a fused fma rounds i s once, as converting i and
// multiplying does; an fma done as a multiply and an add (Vulkan allows it) would round the product
// (1.5 * 2^23 + i) s, to about s.
const int Q8_FLOAT_BIAS = 0x4B400000;
const float Q8_UNBIAS = -12582912.0;  // -1.5 * 2^23
float q8_biased_scaled(int biased, float s, float unbias_s) { return fma(intBitsToFloat(biased), s, unbias_s); }

#if defined(Q8_FROM_LANES)
// The largest magnitude of a 32-element block held as one vec4 by each of 8 consecutive invocations of a subgroup
// (the first at a multiple of 8, all 8 active): the writers of a copy made beside an f32 output (rmsnorm.comp and
// glu.comp with Q8_OUT), whose invocation g holds elements 4g .. 4g + 3. Needs GL_KHR_shader_subgroup_shuffle.
float q8_block_max8(vec4 v) {
  const vec4 a = abs(v);
  float m = max(max(a.x, a.y), max(a.z, a.w));
  m = max(m, subgroupShuffleXor(m, 1u));
  m = max(m, subgroupShuffleXor(m, 2u));
  return max(m, subgroupShuffleXor(m, 4u));
}
#endif
