// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention; the FFN is a mixture of experts routed by
// softmax over all experts, then the top k, their weights renormalized to sum to 1 (llama.cpp's qwen3moe graph).
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kQwen3Moe{
    .tensors = {.attention = {.qkv_bias = Presence::None, .qk_norm = true}, .ffn = {.moe = true}},
    .params = {.moe = {.gating = MoeGating::SoftmaxTopK, .normalize = true, .glu = GluKind::SiLU}},
};

}  // namespace greta::engine::arch
