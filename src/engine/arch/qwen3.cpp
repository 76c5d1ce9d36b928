// qwen3 (dense): qwen2's blocks without biases, with per-head RMSNorm of Q and K before the rotation.
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kQwen3{
    .tensors = {.attention = {.qkv_bias = Presence::None, .qk_norm = true}},
    .params = {},
};

}  // namespace greta::engine::arch
