// qwen2 (Qwen2, Qwen2.5): llama's blocks with NEOX rotary pairs (model_config.cpp) and required Q/K/V
// biases.
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kQwen2{
    .tensors = {.attention = {.qkv_bias = Presence::Required}},
    .params = {},
};

}  // namespace greta::engine::arch
