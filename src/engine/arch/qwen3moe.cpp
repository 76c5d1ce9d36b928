// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention; the FFN is a mixture of experts routed by
// softmax over all experts, then the top k, their weights renormalized to sum to 1 (llama.cpp's qwen3moe graph).
#include "engine/arch/arch.h"
#include "engine/arch/blocks.h"

namespace greta::engine::arch {

namespace {

ModelWeights map(const model::GgufFile& file, const model::ModelConfig& c) {
  return map_decoder(file, c, {.attention = {.qkv_bias = Presence::None, .qk_norm = true}, .ffn = {.moe = true}});
}

Plan build(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  return build_decoder(c, w, shape, {.moe = true, .moe_params = {.gating = MoeGating::SoftmaxTopK, .normalize = true, .glu = GluKind::SiLU}});
}

}  // namespace

const Architecture kQwen3Moe{map, build};

}  // namespace greta::engine::arch
