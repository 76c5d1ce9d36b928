// Verify mode: runs a backend under test and the CPU reference side by side over the same plans, one op at a time,
// and compares what each op wrote (NMSE = sum (test - ref)^2 / sum ref^2 over the op's output region). The first op
// beyond tolerance names the layer, the op label and the error, which points at the broken kernel directly.
//
// With resync (the default) the reference's output is copied into the tested backend after every comparison, so
// every op is judged on identical inputs and errors do not accumulate along the pass; without it both backends run
// freely and the report shows how the error grows.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/sampler.h"

namespace greta::model {
class GgufFile;
struct ModelConfig;
}  // namespace greta::model

namespace greta::engine {

struct VerifyOptions {
  double max_nmse = 1e-5;     // per op; a GPU with fp16 arithmetic may need 1e-4
  bool resync = true;
  int64_t decode_steps = 2;   // the last decode_steps tokens are fed one per step after prefilling the rest
  ElemType kv_type = ElemType::F16;  // the KV cache's element type in the plans verified
};

struct OpCheck {
  int64_t step = 0;       // 0: the prefill step, then 1.. for the decode steps
  size_t op_index = 0;
  std::string label;      // "blk.1.attn_q"
  int layer = -1;
  OpKind kind = OpKind::Embed;
  int64_t count = 0;      // elements compared
  int64_t token = -1;     // the step's token (row) with the largest error; -1 when the op has no token rows
  int64_t seq = -1;       // that token's sequence (its page-table row in the step); -1 when unknown
  int64_t expert = -1;    // an expert matmul: the expert of the worst (token, slot) row; -1 otherwise
  double nmse = 0;
  double max_abs_diff = 0;
  bool ok = true;
};

struct VerifyReport {
  std::string tested, reference;  // backend names
  double max_nmse = 0;            // the tolerance used
  std::vector<OpCheck> checks;    // every op of every step, in order
  std::optional<OpCheck> first_failure;
  double worst_nmse = 0;

  bool ok() const { return !first_failure.has_value(); }
  // One line: "verify OK: 123 ops, worst NMSE 1.2e-09" or
  // "verify FAILED: step 0 op 17 blk.1.attn (attention, layer 1): NMSE 3.1e-02 > 1e-05, max |diff| 0.4".
  std::string summary() const;
};

// Loads `weights` into both backends (which must be fresh), prefills tokens[0 .. n - decode_steps) as one step, then
// feeds the remaining tokens one step each, comparing every op. tokens must be non-empty and inside the vocabulary.
VerifyReport verify(const model::ModelConfig& config, const ModelWeights& weights, Backend& tested, Backend& reference,
                    std::span<const TokenId> tokens, const VerifyOptions& options = {});

// Compares one prepared step op by op (the building block of verify(); both plans prepared from the same Plan).
void verify_step(Backend& tested, PreparedPlan& tested_plan, Backend& reference, PreparedPlan& reference_plan,
                 const StepInput& step, int64_t step_index, const VerifyOptions& options, VerifyReport& report);

}  // namespace greta::engine
