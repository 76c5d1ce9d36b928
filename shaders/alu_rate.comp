#version 450
// Lab kernel for vk_alu_bench: the issue rate of one arithmetic instruction kind, in CHAINS independent dependent
// chains per invocation (enough for the latency to hide across a GPU's warps), `iterations` steps each:
//   OP_DP4A   acc = dotPacked4x8EXT(acc, m) + acc        (GL_EXT_integer_dot_product: the int8 decode matvecs)
//   OP_IMAD   acc = acc * m + c                          (int32 multiply-add)
//   OP_FFMA   acc = fma(acc, m, c)                       (f32)
//   OP_HFMA2  acc = fma(acc, m, c) on f16vec2            (packed f16)
//   OP_I2F    acc = floatBitsToInt(float(acc))           (int-to-float conversion)
// Each step's operand is the previous step's result, so nothing can be hoisted or folded; every chain's last value
// is added into the invocation's output word, which the bench checks against the same chains run on the CPU.
#extension GL_EXT_integer_dot_product : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
const uint OP_DP4A = 0, OP_IMAD = 1, OP_FFMA = 2, OP_HFMA2 = 3, OP_I2F = 4;
layout(constant_id = 0) const uint OP = OP_DP4A;
layout(binding = 0) readonly buffer In { uint seeds[]; };  // [0, CHAINS): chain seeds; CHAINS: m; CHAINS + 1: c
layout(binding = 1) writeonly buffer Out { uint result[]; };
layout(push_constant) uniform Push { uint iterations; } pc;
const uint CHAINS = 8;

void main() {
  const uint gid = gl_GlobalInvocationID.x, m = seeds[CHAINS], c = seeds[CHAINS + 1u];
  uint acc[CHAINS];
  [[unroll]] for (uint i = 0; i < CHAINS; ++i) acc[i] = seeds[i] ^ gid;
  for (uint it = 0; it < pc.iterations; ++it) {
    [[unroll]] for (uint i = 0; i < CHAINS; ++i) {
      if (OP == OP_DP4A) acc[i] = uint(dotPacked4x8EXT(int(acc[i]), int(m)) + int(acc[i]));
      if (OP == OP_IMAD) acc[i] = acc[i] * m + c;
      if (OP == OP_FFMA) acc[i] = floatBitsToUint(fma(uintBitsToFloat(acc[i]), uintBitsToFloat(m), uintBitsToFloat(c)));
      if (OP == OP_HFMA2) acc[i] = packFloat2x16(fma(unpackFloat2x16(acc[i]), unpackFloat2x16(m), unpackFloat2x16(c)));
      if (OP == OP_I2F) acc[i] = floatBitsToUint(float(int(acc[i])));
    }
  }
  uint r = 0;
  [[unroll]] for (uint i = 0; i < CHAINS; ++i) r += acc[i];
  result[gid] = r;
}
