// Architectures: each file of this folder describes one (llama.cpp, qwen2.cpp, gemma3.cpp, ...): which tensors it
// reads and which pieces of blocks.h its forward pass is built from. Adding one = its file, a line in
// registry.cpp, its metadata in model/model_config.cpp, and tests (docs/engine.md, "Adding an architecture").
#pragma once
#include "engine/arch/blocks.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "model/model_config.h"

namespace greta::model {
class GgufFile;
}

namespace greta::engine::arch {

// Every architecture so far is a decoder of the pieces in blocks.h, described by data: its tensors (map_decoder)
// and its forward pass's choices (build_decoder). One that is not would add its own functions here.
struct Architecture {
  DecoderTensors tensors;
  DecoderParams params;
};

const Architecture& architecture(model::Arch arch);

// Defined by the architecture files.
extern const Architecture kLlama, kQwen2, kQwen3, kQwen3Moe, kGemma3, kPhi3, kGptOss;

}  // namespace greta::engine::arch
