// gemma3: embeddings scaled by sqrt(dim); Q/K norms; RMSNorms after the attention and the FFN as well as
// before (the file's norm weights already hold gemma's 1 + w); a GELU(tanh)-gated FFN; sliding-window layers with
// their own rope base and every sixth layer global (model_config.cpp reads the window, the pattern and the bases).
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture kGemma3{
    .tensors = {.attention = {.qkv_bias = Presence::None, .qk_norm = true, .post_norm = true},
                .ffn = {.post_norm = true}},
    .params = {.glu = GluKind::GeluTanh},
};

}  // namespace greta::engine::arch
