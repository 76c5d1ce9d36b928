// llama (Llama 1-3, Mistral, TinyLlama, ...): pre-norm blocks of rotary attention (adjacent pairs; Q/K/V
// biases when the file has them, as llama.cpp loads them) and a SiLU-gated FFN.
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kLlama{
    .tensors = {.attention = {.qkv_bias = Presence::Optional}},
    .params = {},
};

}  // namespace greta::engine::arch
