// gemma3: embeddings scaled by sqrt(dim); Q/K norms; RMSNorms after the attention and the FFN as well as
// before (the file's norm weights already hold gemma's 1 + w); a GELU(tanh)-gated FFN; sliding-window layers with
// their own rope base and every sixth layer global (model_config.cpp reads the window, the pattern and the bases).
#include "engine/arch/arch.h"
#include "engine/arch/blocks.h"

namespace greta::engine::arch {

namespace {

ModelWeights map(const model::GgufFile& file, const model::ModelConfig& c) {
  return map_decoder(file, c, {.attention = {.qkv_bias = Presence::None, .qk_norm = true, .post_norm = true}, .ffn = {.post_norm = true}});
}

Plan build(const model::ModelConfig& c, const ModelWeights& w, const PlanShape& shape) {
  return build_decoder(c, w, shape, {.embed_scale = c.embed_scale, .glu = GluKind::GeluTanh});
}

}  // namespace

const Architecture kGemma3{map, build};

}  // namespace greta::engine::arch
