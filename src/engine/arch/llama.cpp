// llama (Llama 1-3, Mistral, TinyLlama, ...): pre-norm blocks of rotary attention (adjacent pairs; Q/K/V
// biases when the file has them, as llama.cpp loads them) and a SiLU-gated FFN.
#include "engine/arch/arch.h"
#include "engine/arch/blocks.h"

namespace greta::engine::arch {

namespace {

ModelWeights map(const model::GgufFile& file, const model::ModelConfig& c) {
  return map_decoder(file, c, {.attention = {.qkv_bias = Presence::Optional}});
}

Plan build(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  return build_decoder(c, w, shape, {});
}

}  // namespace

const Architecture kLlama{map, build};

}  // namespace greta::engine::arch
