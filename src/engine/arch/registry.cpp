#include "core/error.h"
#include "engine/arch/arch.h"

namespace greta::engine::arch {

const Architecture& architecture(model::Arch arch) {
  switch (arch) {
    case model::Arch::Llama: return kLlama;
    case model::Arch::Qwen2: return kQwen2;
    case model::Arch::Qwen3: return kQwen3;
    case model::Arch::Qwen3Moe: return kQwen3Moe;
    case model::Arch::Gemma3: return kGemma3;
    case model::Arch::Phi3: return kPhi3;
    case model::Arch::GptOss: return kGptOss;
  }
  fail("no plan builder for architecture ", model::arch_name(arch));
}

}  // namespace greta::engine::arch

namespace greta::engine {

// engine/model.h and engine/plan.h: the architecture's file does the work.
ModelWeights map_weights(const model::GgufFile& file, const model::ModelConfig& config) {
  return arch::map_decoder(file, config, arch::architecture(config.arch).tensors);
}

Plan build_plan(const model::ModelConfig& config, const ModelWeights& weights, const PlanShape& shape) {
  return arch::build_decoder(config, weights, shape, arch::architecture(config.arch).params);
}

}  // namespace greta::engine
