// qwen2 (Qwen2, Qwen2.5): llama's blocks with NEOX rotary pairs (model_config.cpp) and required Q/K/V
// biases.
#include "engine/arch/arch.h"
#include "engine/arch/blocks.h"

namespace greta::engine::arch {

namespace {

ModelWeights map(const model::GgufFile& file, const model::ModelConfig& c) {
  return map_decoder(file, c, {.attention = {.qkv_bias = Presence::Required}});
}

Plan build(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  return build_decoder(c, w, shape, {});
}

}  // namespace

const Architecture kQwen2{map, build};

}  // namespace greta::engine::arch
