#version 450
// Decodes `rows` weight rows of `cols` elements to f32: out_values[r * cols + c] = element c of the row starting at
// byte first_row_byte + r * row_bytes. WTYPE_<T> picks the weight type (shaders/dequant.glsl). A utility kernel and
// the GPU side of the decoder tests (tests/vk/dequant_test.cpp). Workgroup size x is specialization constant 0;
// grid-stride loop over (row, group of 4 columns) items; a last partial group (cols % 4 != 0, f32/f16/bf16 only) is
// decoded element by element.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) writeonly buffer OutBuf { float out_values[]; };
layout(push_constant) uniform Push {
  uint first_row_byte;
  uint row_bytes;
  uint rows;
  uint cols;
} pc;
#include "dequant.glsl"

void main() {
  const uint groups_per_row = (pc.cols + 3u) / 4u;
  const uint items = pc.rows * groups_per_row;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < items; i += stride) {
    const uint r = i / groups_per_row, c = (i % groups_per_row) * 4u;
    const uint row_byte = pc.first_row_byte + r * pc.row_bytes;
    const uint o = r * pc.cols + c;
    if (c + 4u <= pc.cols) {
      const vec4 v = dequant4(row_byte, c);
      out_values[o] = v.x;
      out_values[o + 1u] = v.y;
      out_values[o + 2u] = v.z;
      out_values[o + 3u] = v.w;
    } else {
      for (uint k = 0u; c + k < pc.cols; ++k) out_values[o + k] = dequant1(row_byte, c + k);
    }
  }
}
