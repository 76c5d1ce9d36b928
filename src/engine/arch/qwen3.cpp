// qwen3 (dense): qwen2's blocks without biases, with per-head RMSNorm of Q and K before the rotation.
#include "engine/arch/arch.h"
#include "engine/arch/blocks.h"

namespace greta::engine::arch {

namespace {

ModelWeights map(const model::GgufFile& file, const model::ModelConfig& c) {
  return map_decoder(file, c, {.attention = {.qkv_bias = Presence::None, .qk_norm = true}});
}

Plan build(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  return build_decoder(c, w, shape, {});
}

}  // namespace

const Architecture kQwen3{map, build};

}  // namespace greta::engine::arch
