// Experiment switches: kernel choices forced by name, for measurements and tests (GRETA_VK_GEMM_Q8=4x1x4x256 runs
// every int8 GEMM on that tile). Each is read where its rule lives (the list below names the file). A backend has
// none unless whoever creates it hands it a source: `greta-vk bench`, the kernel benches and the tests take them from
// the environment; `run`, `chat`, `serve`, `logits` and `tune` never do, so a variable left set in a shell cannot
// change what a user runs or what the tuner measures.
#pragma once
#include <string_view>

namespace greta::vk {

class ExperimentSwitches {
public:
  // The switches, each with its value's form (a bad value is a one-line error where it is read):
  //   GRETA_VK_MATMUL=auto|tiled|coopmat|matvec    every matmul's kernel (vk_backend.cpp)
  //   GRETA_VK_MATVEC_Q8=0|1                       int8 decode activations (vk_backend.cpp)
  //   GRETA_VK_FUSE=all|none|LIST                  the fusions (fusion.cpp)
  //   GRETA_VK_MATVEC=WGxROWS, GRETA_VK_MOE_MATVEC the decode matvecs' workgroups (op_matvec.cpp, op_moe.cpp)
  //   GRETA_VK_COOPMAT_TILE, GRETA_VK_TILED_TILE   the prefill GEMMs' tiles (op_matmul.cpp)
  //   GRETA_VK_GEMM_X16=0, GRETA_VK_GEMM_SPLIT=N, GRETA_VK_GEMM_DEPTH=1|2|3, GRETA_VK_GEMM_Q8=0|FMxFNxWNxBK[xSPLIT]
  //                                                the GEMMs' inputs, split-K, load depth, int8 tiles (op_matmul.cpp)
  //   GRETA_VK_ATTN_HEADS=1|2|4, GRETA_VK_ATTN_COOPMAT=0|1   decode attention's layout and kernel (op_attention.cpp)
  //   GRETA_VK_MOE_TILE=BMxBNxWMxWN[xBK[xKG]]      the grouped expert GEMM's tile (op_moe.cpp)
  //   GRETA_VK_SPIN_US=N                           how long waits poll before blocking (vk_backend.cpp; a backend
  //                                                with its own device only)
  static constexpr std::string_view kNames[] = {
      "GRETA_VK_MATMUL",       "GRETA_VK_MATVEC_Q8",  "GRETA_VK_FUSE",        "GRETA_VK_MATVEC",
      "GRETA_VK_MOE_MATVEC",   "GRETA_VK_COOPMAT_TILE", "GRETA_VK_TILED_TILE", "GRETA_VK_GEMM_X16",
      "GRETA_VK_GEMM_SPLIT",   "GRETA_VK_GEMM_DEPTH", "GRETA_VK_GEMM_Q8",     "GRETA_VK_ATTN_HEADS",
      "GRETA_VK_ATTN_COOPMAT", "GRETA_VK_MOE_TILE",   "GRETA_VK_SPIN_US"};

  // No switches: the rules decide everything (the default).
  ExperimentSwitches() = default;
  // The switches as the environment sets them when each is read.
  static ExperimentSwitches from_environment() { return ExperimentSwitches(true); }

  // The value of switch `name` (one of kNames), or nullptr when it is unset or empty or this source has none.
  const char* get(std::string_view name) const;

private:
  explicit ExperimentSwitches(bool environment) : environment_(environment) {}
  bool environment_ = false;
};

}  // namespace greta::vk
