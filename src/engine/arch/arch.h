// Architectures: each file of this folder describes one (llama.cpp, qwen2.cpp, gemma3.cpp, ...): which tensors it
// reads and how its forward pass is built from the pieces in blocks.h. Adding one = its file, a line in
// registry.cpp, its metadata in model/model_config.cpp, and tests (docs/adding-an-architecture.md).
#pragma once
#include "engine/model.h"
#include "engine/plan.h"
#include "model/model_config.h"

namespace greta::model {
class GgufFile;
}

namespace greta::engine::arch {

struct Architecture {
  // Finds and checks the tensors (throws greta::Error naming a missing, misshapen or unexpected one).
  ModelWeights (*map_weights)(const model::GgufFile& file, const model::ModelConfig& config);
  // The forward pass for one step shape.
  Plan (*build_plan)(const model::ModelConfig& config, const ModelWeights& weights, const PlanShape& shape);
};

const Architecture& architecture(model::Arch arch);

// Defined by the architecture files.
extern const Architecture kLlama, kQwen2, kQwen3, kQwen3Moe, kGemma3, kPhi3, kGptOss;

}  // namespace greta::engine::arch
