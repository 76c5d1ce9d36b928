// phi3 (Phi-3, Phi-3.5, Phi-4): one fused attn_qkv tensor (Q, K, V rows in that order) and one fused ffn_up
// (gate rows, then up rows), both used in place as row slices; NEOX rotary pairs; LongRoPE's long and short
// frequency factors when the file has them. The file's sliding window is not applied, as llama.cpp does not.
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kPhi3{
    .tensors = {.attention = {.qkv_bias = Presence::None, .fused_qkv = true},
                .ffn = {.fused_gate_up = true},
                .longrope_factors = true},
    .params = {},
};

}  // namespace greta::engine::arch
