#version 450
// Cooperative-matrix test kernel: C[M x N] (f32) = A[M x K] (f16) * B[K x N] (f16), all row-major, M, N, K multiples
// of 16. One subgroup per workgroup computes one 16x16 tile of C, walking K in steps of 16 with
// coopmat<16x16x16> multiply-adds. Workgroup size x (spec constant 0) must equal the subgroup size, which the host
// pins with requiredSubgroupSize where the device allows it. Dispatch (N/16, M/16, 1) workgroups.
// Needs VK_KHR_cooperative_matrix with a 16x16x16 f16*f16->f32 subgroup-scope shape.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x_id = 0) in;
layout(binding = 0) readonly buffer A { float16_t a[]; };
layout(binding = 1) readonly buffer B { float16_t b[]; };
layout(binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; } pc;
const uint TILE = 16;
void main() {
  const uint tile_col = gl_WorkGroupID.x * TILE;
  const uint tile_row = gl_WorkGroupID.y * TILE;
  coopmat<float, gl_ScopeSubgroup, TILE, TILE, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeSubgroup, TILE, TILE, gl_MatrixUseAccumulator>(0.0);
  for (uint kk = 0; kk < pc.k; kk += TILE) {
    coopmat<float16_t, gl_ScopeSubgroup, TILE, TILE, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, TILE, TILE, gl_MatrixUseB> mb;
    coopMatLoad(ma, a, tile_row * pc.k + kk, pc.k, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(mb, b, kk * pc.n + tile_col, pc.n, gl_CooperativeMatrixLayoutRowMajor);
    acc = coopMatMulAdd(ma, mb, acc);
  }
  coopMatStore(acc, c, tile_row * pc.n + tile_col, pc.n, gl_CooperativeMatrixLayoutRowMajor);
}
