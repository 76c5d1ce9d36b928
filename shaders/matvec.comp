#version 450
// Matrix-vector products for one weight type (WTYPE_*): y[t, out_row0 + r] = dot(weight row r, x[t, :]) for the
// `rows` rows bound at binding 0 (one chunk of a possibly split weight) and every token t < n_tokens
// (gl_WorkGroupID.y). The decode path: bandwidth-bound, each weight byte is read once per token.
//
// Work split: a workgroup of WG invocations (spec constant 0, a multiple of the subgroup size) owns ROWS consecutive
// rows (spec constant 1, <= 8); every invocation walks the row in groups of 4 elements (dequant4) with a stride of
// 4 * WG, keeping one partial sum per row; partial sums are reduced with subgroupAdd, then across subgroups through
// shared memory. Row groups are a grid-stride loop, so any row count fits the device's group-count limit.
//
// Fused input (spec constant 3, INPUT; the backend's decode fusions, src/vk/backend/fusion.h):
//   IN_RMSNORM  x is the un-normalized row (x_row0 + t) of the residual stream and aux the norm weight: the kernel
//               computes dot(w, x * aux) and the row's sum of squares in the same pass, then multiplies the reduced
//               dot product by 1 / sqrt(sum / cols + eps) -- rmsnorm(x) . w without the rmsnorm dispatch (1/rms is
//               one scalar per token, so it factors out of the dot product; results equal the unfused pair up to f32
//               rounding).
//   IN_SWIGLU   x is the gate and aux the up projection (same layout): the activation is silu(x) * aux, computed as
//               the swiglu kernel does.
//   IN_SWIGLU_OAI  the same with gpt-oss's clamped SwiGLU (glu.glsl), alpha and limit spec constants 6 and 7.
//
// ROUTE (matvec_route_<type>): a MoE router whose route follows (engine::MoeRouteOp over y, the fusions of
// src/vk/backend/fusion.h). y holds the logits [tokens, rows] (one chunk: out_row0 0, out_stride rows); every
// workgroup makes its rows visible device-wide and counts itself (atomicAdd on route_counter); the last of the
// dispatch to finish reads all logits back (y is coherent) and routes each token (moe_route.glsl, gating: spec
// constant 8), then returns the counter to 0 for the next step. The route's stage of its own, between two barriers,
// was about 8 % of a Qwen3-30B-A3B-shaped decode layer on the H200.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 2;
layout(constant_id = 2) const bool ACCUMULATE = false;  // y += W x (a fused residual add) instead of y = W x
const uint IN_PLAIN = 0, IN_RMSNORM = 1, IN_SWIGLU = 2, IN_SWIGLU_OAI = 3;
layout(constant_id = 3) const uint INPUT = IN_PLAIN;
layout(constant_id = 6) const float GLU_ALPHA = 1.702;  // IN_SWIGLU_OAI
layout(constant_id = 7) const float GLU_LIMIT = 7.0;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
layout(binding = 1) readonly buffer X { float x[]; };
#if defined(ROUTE)
layout(binding = 2) coherent buffer Y { float y[]; };
#else
layout(binding = 2) buffer Y { float y[]; };
#endif
layout(binding = 3) readonly buffer Aux { float aux[]; };  // IN_RMSNORM: norm weight [cols]; IN_SWIGLU: up; else unused
// BIAS: y = W x + bias (the bias add after the matmul, fused by fusion.cpp); bias indexed by the output row.
layout(constant_id = 5) const bool BIAS = false;
layout(binding = 4) readonly buffer Bias { float bias[]; };
layout(push_constant) uniform Push {
  uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride;
  uint x_row0;  // token t reads row x_row0 + t of x (IN_RMSNORM: the final norm of the last token only)
  float eps;    // IN_RMSNORM
#if defined(ROUTE)
  uint route_k; uint route_normalize;
#endif
} pc;
#include "dequant.glsl"
#include "glu.glsl"
#if defined(ROUTE)
layout(constant_id = 8) const uint ROUTE_GATING = 0;
layout(binding = 5) writeonly buffer Experts { int route_experts[]; };    // [tokens, k]
layout(binding = 6) writeonly buffer Weights { float route_weights[]; };  // [tokens, k]
layout(binding = 7) coherent buffer Counter { uint route_counter[]; };    // 0 between steps
float route_logit(uint i) { return y[i]; }
#include "moe_route.glsl"
shared bool route_is_last;

void route_in_last_workgroup() {
  const uint tid = gl_LocalInvocationID.x;
  memoryBarrierBuffer();  // this workgroup's logits are visible before it is counted
  barrier();
  if (tid == 0) route_is_last = atomicAdd(route_counter[0], 1u) == gl_NumWorkGroups.x * gl_NumWorkGroups.y - 1u;
  barrier();
  if (!route_is_last) return;
  memoryBarrierBuffer();
  for (uint t = 0; t < gl_NumWorkGroups.y; ++t) route_token(t, pc.rows, pc.route_k, pc.route_normalize != 0);
  if (tid == 0) route_counter[0] = 0u;  // every workgroup has counted: ready for the next step
}
#endif

const uint MAX_ROWS = 8;
const uint MAX_SUBGROUPS = 64;
shared float partial[MAX_ROWS * MAX_SUBGROUPS];
shared float partial_ss[MAX_SUBGROUPS];  // IN_RMSNORM: the sum of squares per subgroup

// The activation of element e of the row at x_base; IN_RMSNORM adds the element's square to ss.
float activation(uint x_base, uint e, inout float ss) {
  const float v = x[x_base + e];
  if (INPUT == IN_RMSNORM) {
    ss += v * v;
    return v * aux[e];
  }
  if (INPUT == IN_SWIGLU) return glu_silu(v, aux[x_base + e]);
  if (INPUT == IN_SWIGLU_OAI) return glu_oai(v, aux[x_base + e], GLU_ALPHA, GLU_LIMIT);
  return v;
}

// Per-row partial sums are named variables (acc0..acc7, guarded by spec-constant conditions) rather than an array
// indexed in loops bounded by ROWS: the H100 driver keeps such arrays in memory (see matmul_coopmat.comp).
#define ROW_ADD(r, value) if (r < ROWS && row0 + r < pc.rows) acc##r += value;
#define ROW_REDUCE(r)                                                      \
  if (r < ROWS) {                                                          \
    const float v = subgroupAdd(acc##r);                                   \
    if (subgroupElect()) partial[r * MAX_SUBGROUPS + gl_SubgroupID] = v;   \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint t = gl_WorkGroupID.y;
  const uint x_base = (pc.x_row0 + t) * pc.cols;
  const uint cols4 = pc.cols & ~3u;
  const uint row_groups = (pc.rows + ROWS - 1) / ROWS;
  for (uint rg = gl_WorkGroupID.x; rg < row_groups; rg += gl_NumWorkGroups.x) {
    const uint row0 = rg * ROWS;
    float acc0 = 0.0, acc1 = 0.0, acc2 = 0.0, acc3 = 0.0, acc4 = 0.0, acc5 = 0.0, acc6 = 0.0, acc7 = 0.0;
    float ss = 0.0;
    for (uint e = tid * 4; e < cols4; e += wg * 4) {
      vec4 xv;
      for (uint j = 0; j < 4; ++j) xv[j] = activation(x_base, e + j, ss);
      ROW_ADD(0, dot(dequant4((row0 + 0) * pc.row_bytes, e), xv))
      ROW_ADD(1, dot(dequant4((row0 + 1) * pc.row_bytes, e), xv))
      ROW_ADD(2, dot(dequant4((row0 + 2) * pc.row_bytes, e), xv))
      ROW_ADD(3, dot(dequant4((row0 + 3) * pc.row_bytes, e), xv))
      ROW_ADD(4, dot(dequant4((row0 + 4) * pc.row_bytes, e), xv))
      ROW_ADD(5, dot(dequant4((row0 + 5) * pc.row_bytes, e), xv))
      ROW_ADD(6, dot(dequant4((row0 + 6) * pc.row_bytes, e), xv))
      ROW_ADD(7, dot(dequant4((row0 + 7) * pc.row_bytes, e), xv))
    }
    for (uint e = cols4 + tid; e < pc.cols; e += wg) {  // tails exist only for f32/f16/bf16 rows
      const float xe = activation(x_base, e, ss);
      ROW_ADD(0, dequant1((row0 + 0) * pc.row_bytes, e) * xe) ROW_ADD(1, dequant1((row0 + 1) * pc.row_bytes, e) * xe)
      ROW_ADD(2, dequant1((row0 + 2) * pc.row_bytes, e) * xe) ROW_ADD(3, dequant1((row0 + 3) * pc.row_bytes, e) * xe)
      ROW_ADD(4, dequant1((row0 + 4) * pc.row_bytes, e) * xe) ROW_ADD(5, dequant1((row0 + 5) * pc.row_bytes, e) * xe)
      ROW_ADD(6, dequant1((row0 + 6) * pc.row_bytes, e) * xe) ROW_ADD(7, dequant1((row0 + 7) * pc.row_bytes, e) * xe)
    }
    ROW_REDUCE(0) ROW_REDUCE(1) ROW_REDUCE(2) ROW_REDUCE(3) ROW_REDUCE(4) ROW_REDUCE(5) ROW_REDUCE(6) ROW_REDUCE(7)
    if (INPUT == IN_RMSNORM) {
      const float s = subgroupAdd(ss);
      if (subgroupElect()) partial_ss[gl_SubgroupID] = s;
    }
    barrier();
    if (tid < ROWS && row0 + tid < pc.rows) {
      float s = 0.0;
      for (uint i = 0; i < gl_NumSubgroups; ++i) s += partial[tid * MAX_SUBGROUPS + i];
      if (INPUT == IN_RMSNORM) {
        float sum_sq = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; ++i) sum_sq += partial_ss[i];
        s *= inversesqrt(sum_sq / float(pc.cols) + pc.eps);
      }
      if (BIAS) s += bias[pc.out_row0 + row0 + tid];
      const uint at = t * pc.out_stride + pc.out_row0 + row0 + tid;
      y[at] = ACCUMULATE ? y[at] + s : s;
    }
    barrier();  // partial[] is reused by the next row group
  }
#if defined(ROUTE)
  route_in_last_workgroup();
#endif
}
