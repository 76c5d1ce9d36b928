// gpt-oss (gpt-oss-20b, -120b): attention with Q/K/V/O biases and a learned sink logit per head, sliding-
// window on every other layer (even layers), YaRN rope; a mixture of experts routed by the top k router logits
// (plus the router bias), weighted by a softmax over those k, with expert biases and the clamped SwiGLU.
#include "engine/arch/arch.h"
#include "engine/arch/blocks.h"

namespace greta::engine::arch {

namespace {

ModelWeights map(const model::GgufFile& file, const model::ModelConfig& c) {
  return map_decoder(file, c, {.attention = {.qkv_bias = Presence::Required, .output_bias = true, .sinks = true},
                                  .ffn = {.moe = true, .moe_biases = true, .norm_name = "post_attention_norm"}});
}

Plan build(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  return build_decoder(c, w, shape, {.moe = true, .moe_params = {.gating = MoeGating::TopKSoftmax, .normalize = false, .glu = GluKind::SwiGluOai}});
}

}  // namespace

const Architecture kGptOss{map, build};

}  // namespace greta::engine::arch
