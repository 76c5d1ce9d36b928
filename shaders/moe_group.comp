#version 450
// Groups a step's expert slots by expert for the grouped expert GEMM (moe_gemm.comp), in one workgroup:
//   sorted[]  the slot ids (t * k + s) of expert 0, then expert 1, ..., each expert's in slot order (deterministic)
//   tiles[]   word 0: the number of tiles; then per tile 3 words (expert, first index into sorted, rows <= BM): each
//             expert's slots cut into tiles of BM (spec constant 1), experts in id order
// Invocation i counts and lists the experts i, i + WG, ... (each scans the slots: O(n_experts * slots / WG)
// reads, cached); invocation 0 takes the prefix sums. Slots naming no expert in range are left out (never written).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;
layout(binding = 0) readonly buffer Experts { int experts[]; };  // [slots]
layout(binding = 1) writeonly buffer Sorted { uint sorted[]; };  // [slots]
layout(binding = 2) writeonly buffer Tiles { uint tiles[]; };    // [1 + 3 * max tiles]
layout(push_constant) uniform Push { uint slots; uint n_experts; } pc;

const uint MAX_EXPERTS = 512;  // the host checks n_experts <= MAX_EXPERTS
shared uint count[MAX_EXPERTS], first[MAX_EXPERTS], first_tile[MAX_EXPERTS];

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  for (uint e = tid; e < pc.n_experts; e += wg) {
    uint c = 0;
    for (uint i = 0; i < pc.slots; ++i) c += uint(experts[i]) == e ? 1u : 0u;
    count[e] = c;
  }
  barrier();
  if (tid == 0) {
    uint at = 0, tile = 0;
    for (uint e = 0; e < pc.n_experts; ++e) {
      first[e] = at;
      first_tile[e] = tile;
      at += count[e];
      tile += (count[e] + BM - 1) / BM;
    }
    tiles[0] = tile;
  }
  barrier();
  for (uint e = tid; e < pc.n_experts; e += wg) {
    uint at = first[e];
    for (uint i = 0; i < pc.slots; ++i)
      if (uint(experts[i]) == e) sorted[at++] = i;
    const uint n = count[e];
    for (uint j = 0; j * BM < n; ++j) {
      const uint w = 1 + 3 * (first_tile[e] + j);
      tiles[w] = e;
      tiles[w + 1] = first[e] + j * BM;
      tiles[w + 2] = min(BM, n - j * BM);
    }
  }
}
