#version 450
// out[r, :] = in[rows[r], :] for r < n_rows, rows of `width` floats: the rows whose logits a step returns, gathered
// before the final norm (engine GatherRowsOp). Grid-stride loop over the n_rows * width elements.
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer In { float x[]; };
layout(binding = 1) readonly buffer Rows { int rows[]; };
layout(binding = 2) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Push { uint n_rows; uint width; } pc;
void main() {
  const uint count = pc.n_rows * pc.width;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
    const uint r = i / pc.width, c = i - r * pc.width;
    o[i] = x[uint(rows[r]) * pc.width + c];
  }
}
