// gpt-oss (gpt-oss-20b, -120b): attention with Q/K/V/O biases and a learned sink logit per head, sliding-
// window on every other layer (even layers), YaRN rope; a mixture of experts routed by the top k router logits
// (plus the router bias), weighted by a softmax over those k, with expert biases and the clamped SwiGLU.
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kGptOss{
    .tensors = {.attention = {.qkv_bias = Presence::Required, .output_bias = true, .sinks = true},
                .ffn = {.moe = true, .moe_biases = true, .norm_name = "post_attention_norm"}},
    .params = {.moe = {.gating = MoeGating::TopKSoftmax, .normalize = false, .glu = GluKind::SwiGluOai}},
};

}  // namespace greta::engine::arch
