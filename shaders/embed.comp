#version 450
// Embedding lookup for one weight type (WTYPE_*, see dequant.glsl): out[t, :] = dequantized row tokens[t] of the
// table. The table may be split over several buffers (memory.h: SplitBuffer); one dispatch covers the rows
// [row_begin, row_begin + chunk_rows) bound at binding 0 and writes only the tokens whose id falls in that range.
// One invocation per (token, group of 4 columns); grid-stride loop. Every value is multiplied by `scale` (gemma3's
// sqrt(dim); 1 otherwise, which is exact).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer Tokens { int tokens[]; };
layout(binding = 2) writeonly buffer Out { float y[]; };
layout(push_constant) uniform Push { uint row_begin; uint chunk_rows; uint row_bytes; uint cols; uint n_tokens; float scale; } pc;
#include "dequant.glsl"

void main() {
  const uint groups = (pc.cols + 3) / 4;
  const uint count = pc.n_tokens * groups;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint item = gl_GlobalInvocationID.x; item < count; item += stride) {
    const uint t = item / groups, e = (item - t * groups) * 4;
    const uint row = uint(tokens[t]) - pc.row_begin;  // wraps to a huge value below row_begin
    if (row >= pc.chunk_rows) continue;
    const uint row_byte = row * pc.row_bytes;
    const uint dst = t * pc.cols + e;
    if (e + 4 <= pc.cols) {
      const vec4 v = dequant4(row_byte, e) * pc.scale;
      y[dst] = v.x; y[dst + 1] = v.y; y[dst + 2] = v.z; y[dst + 3] = v.w;
    } else {
      for (uint c = e; c < pc.cols; ++c) y[dst + c - e] = dequant1(row_byte, c) * pc.scale;
    }
  }
}
