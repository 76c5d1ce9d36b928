// The grouped expert GEMM's grouping (src/hip/moe_group.h), run on the CPU exactly as moe_group_kernel runs it: the
// tile table covers every slot of every expert once, tiles hold at most 64 slots of one expert, and the grid bound
// max_tiles is never exceeded (the kernel writes the table into a buffer of max_tiles entries).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "hip/moe_group.h"

using namespace greta::hip;

namespace {

// counts -> build_tiles -> scatter (in slot order here; any order on the device), then the checks.
void check_grouping(const std::vector<int32_t>& experts, int64_t n_experts, int32_t tile) {
  const int64_t slots = int64_t(experts.size());
  std::vector<int32_t> counts(size_t(n_experts), 0), offsets(size_t(n_experts), -1), sorted(size_t(slots), -1);
  for (int32_t e : experts)
    if (e >= 0 && e < n_experts) ++counts[size_t(e)];
  const int64_t bound = moe::max_tiles(slots, n_experts, tile);
  std::vector<moe::Tile> tiles(size_t(bound) + 1, moe::Tile{-7, -7, -7});  // one guard entry
  const int32_t n_tiles = moe::build_tiles(counts.data(), n_experts, tile, offsets.data(), tiles.data());
  REQUIRE(n_tiles <= bound);
  CHECK(tiles[size_t(bound)].expert == -7);
  std::vector<int32_t> cursor = offsets;
  for (int64_t i = 0; i < slots; ++i) {
    const int32_t e = experts[size_t(i)];
    if (e >= 0 && e < n_experts) sorted[size_t(cursor[size_t(e)]++)] = int32_t(i);
  }
  // Every valid slot once; each tile's entries are slots of its expert; tiles in expert order, back to back.
  std::vector<int> seen(size_t(slots), 0);
  int32_t next = 0;
  for (int32_t t = 0; t < n_tiles; ++t) {
    const moe::Tile& x = tiles[size_t(t)];
    CHECK(x.begin == next);
    CHECK(x.end > x.begin);
    CHECK(x.end - x.begin <= tile);
    if (t > 0) CHECK(x.expert >= tiles[size_t(t - 1)].expert);
    for (int32_t j = x.begin; j < x.end; ++j) {
      REQUIRE(sorted[size_t(j)] >= 0);
      CHECK(experts[size_t(sorted[size_t(j)])] == x.expert);
      ++seen[size_t(sorted[size_t(j)])];
    }
    next = x.end;
  }
  for (int64_t i = 0; i < slots; ++i) {
    const int32_t e = experts[size_t(i)];
    CHECK(seen[size_t(i)] == (e >= 0 && e < n_experts ? 1 : 0));
  }
}

}  // namespace

TEST_CASE("moe grouping: tiles cover every slot of every expert once, within the grid bound") {
  std::mt19937 rng(5);
  struct Shape {
    int64_t tokens, k, experts;
  };
  for (const Shape s : {Shape{1, 2, 8}, Shape{9, 2, 8}, Shape{130, 2, 4}, Shape{512, 8, 128}, Shape{67, 4, 32},
                        Shape{64, 1, 1}, Shape{65, 1, 1}, Shape{300, 8, 256}}) {
    CAPTURE(s.tokens);
    CAPTURE(s.k);
    CAPTURE(s.experts);
    // Uniform choices, then the worst cases of the bound: every expert used with one slot past a whole tile, and
    // all slots on one expert.
    std::vector<int32_t> experts(size_t(s.tokens * s.k));
    for (auto& e : experts) e = int32_t(rng() % uint32_t(s.experts));
    check_grouping(experts, s.experts, 64);
    for (size_t i = 0; i < experts.size(); ++i) experts[i] = int32_t(i % size_t(s.experts));
    check_grouping(experts, s.experts, 64);
    std::fill(experts.begin(), experts.end(), int32_t(s.experts - 1));
    check_grouping(experts, s.experts, 64);
    // Ids outside [0, n_experts) are in no tile (their rows are zeroed by the kernel).
    experts[0] = -1;
    experts.back() = int32_t(s.experts);
    check_grouping(experts, s.experts, 64);
  }
  // Two experts of 65 slots need 4 tiles; the bound allows (130 + 2 * 63) / 64 = 4.
  CHECK(moe::max_tiles(130, 2, 64) == (130 + 63 * 2) / 64);
  CHECK(moe::max_tiles(130, 2, 64) >= 4);
  CHECK(moe::max_tiles(1, 128, 64) == 1);
}
