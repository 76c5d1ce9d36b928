#version 450
// Groups a step's expert slots by expert for the grouped expert GEMM (moe_gemm.comp, matmul_coopmat.comp's MOE), in
// one workgroup:
//   sorted[]  the slot ids (t * k + s) of expert 0, then expert 1, ...
//   tiles[]   word 0: the number of tiles; then per tile 3 words (expert, first index into sorted, rows <= BM): each
//             expert's slots cut into tiles of BM (spec constant 1), experts in id order
// Counting sort through shared-memory atomics: each invocation counts slots i = tid, tid + WG, ... into count[e];
// each expert's start and first tile are sums over the experts before it (each invocation its own experts); then
// each slot takes the next place of its expert's cursor. The order of one expert's slots is therefore the order in
// which the atomics ran, not the slot order: the GEMMs compute each output as one dot product over K in a fixed
// order whichever tile row holds its slot, so their results do not depend on it (nor do the tiles: each expert's
// count is exact). Scanning all slots once per expert instead (an earlier version, deterministic order) cost
// 0.14 ms per MoE matmul at 4096 slots on an H200, with the whole GPU waiting on it.
// Slots naming no expert in range are left out (never written).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(binding = 0) readonly buffer Experts { int experts[]; };  // [slots]
layout(binding = 1) writeonly buffer Sorted { uint sorted[]; };  // [slots]
layout(binding = 2) writeonly buffer Tiles { uint tiles[]; };    // [1 + 3 * max tiles]
layout(push_constant) uniform Push { uint slots; uint n_experts; } pc;

const uint MAX_EXPERTS = 512;  // the host checks n_experts <= MAX_EXPERTS
shared uint count[MAX_EXPERTS], cursor[MAX_EXPERTS];

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  for (uint e = tid; e < pc.n_experts; e += wg) count[e] = 0;
  barrier();
  for (uint i = tid; i < pc.slots; i += wg) {
    const uint e = uint(experts[i]);
    if (e < pc.n_experts) atomicAdd(count[e], 1u);
  }
  barrier();
  for (uint e = tid; e < pc.n_experts; e += wg) {
    uint at = 0, tile = 0;
    for (uint j = 0; j < e; ++j) {
      at += count[j];
      tile += (count[j] + BM - 1u) / BM;
    }
    cursor[e] = at;
    const uint n = count[e];
    for (uint j = 0; j * BM < n; ++j) {
      const uint w = 1u + 3u * (tile + j);
      tiles[w] = e;
      tiles[w + 1u] = at + j * BM;
      tiles[w + 2u] = min(BM, n - j * BM);
    }
    if (e + 1u == pc.n_experts) tiles[0] = tile + (n + BM - 1u) / BM;
  }
  barrier();
  for (uint i = tid; i < pc.slots; i += wg) {
    const uint e = uint(experts[i]);
    if (e < pc.n_experts) sorted[atomicAdd(cursor[e], 1u)] = i;
  }
}
