// Grouping a step's MoE slots by expert for the grouped expert GEMM (k_moe.hip), written once for host and device
// (GRETA_HD) so that the CPU tests (tests/hip/moe_group_test.cpp) run the code the kernel runs.
//
// Slot i = t * k + s is token t's s-th expert choice, expert experts[i]. The grouped GEMM multiplies, for every expert
// e, the input rows of the slots that chose e by e's weight rows: one launch whose blocks are (output-column tile,
// work tile), a work tile being up to `tile` (= the GEMM's 64 rows) consecutive entries of one expert's slot list:
//   1. counts[e]: the slots that chose e (ids outside [0, n_experts) are in no list; the kernel zeroes their rows)
//   2. build_tiles: offsets[e] = the slots of experts before e (exclusive scan), so expert e's slots are
//      sorted[offsets[e] .. offsets[e] + counts[e]); and the tile table, in expert order, tile i covering
//      sorted[begin, end) of one expert (end - begin <= tile)
//   3. scatter: every slot takes the next free place of its expert's range (an atomic cursor on the device: the order
//      inside a range varies from run to run, which changes nothing: each output row is computed from its own input
//      row alone, the GEMM's arithmetic on a row does not depend on the other rows of its tile)
// The grid is sized by max_tiles (the most tiles any assignment can need), a plan constant, so the launch can be
// captured in a graph; blocks past the step's tile count return at once.
#pragma once
#include <cstdint>

#include "hip/gpu_api.h"

namespace greta::hip::moe {

struct Tile {
  int32_t expert, begin, end;  // sorted[begin, end) are slots of `expert`
};

// Upper bound of sum over experts of ceil(counts[e] / tile) for `slots` slots: each expert in use adds at most
// tile - 1 rows of padding to its last tile, and at most min(n_experts, slots) experts are in use.
GRETA_HD constexpr int64_t max_tiles(int64_t slots, int64_t n_experts, int64_t tile) {
  const int64_t used = slots < n_experts ? slots : n_experts;
  return (slots + (tile - 1) * used) / tile;
}

// Step 2 (one thread): offsets and tiles from counts; returns the number of tiles (<= max_tiles(sum of counts, ...)).
GRETA_HD inline int32_t build_tiles(const int32_t* counts, int64_t n_experts, int32_t tile, int32_t* offsets,
                                    Tile* tiles) {
  int32_t n = 0, offset = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    offsets[e] = offset;
    for (int32_t b = 0; b < counts[e]; b += tile)
      tiles[n++] = {int32_t(e), offset + b, offset + (counts[e] - b < tile ? counts[e] : b + tile)};
    offset += counts[e];
  }
  return n;
}

}  // namespace greta::hip::moe
