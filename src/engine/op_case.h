// OpCase: a hand-built plan of a few ops with its own weights and inputs, run on any backend. The building block of
// the per-op tests (tests/vk/vk_ops_test.cpp: every kernel against the CPU reference) and the kernel benchmarks
// (tools/bench/vk_*_bench: validate on the CPU, then time on the device with the backend's GPU timestamps).
//
//   OpCase c(/*n_tokens=*/5, /*ctx=*/8);          // one sequence, its positions on pages 1, 2, ... (PlanShape::single)
//   BufferId x = c.input("x", 5 * 256, /*seed=*/1);
//   WeightId w = c.weight("w", GgmlType::Q4_0, 37, 256, /*seed=*/2);
//   BufferId y = c.output("y", 5 * 37);
//   c.add("matmul", MatMulOp{x, y, w, 5, 256, 37});
//   auto prepared = c.load_and_prepare(backend);  c.run(backend, *prepared);  c.read(backend, *prepared, y);
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/plan.h"
#include "model/tensor_types.h"

namespace greta::engine {

struct OpCase {
  Plan plan;
  std::vector<WeightDesc> weights;
  std::vector<std::vector<uint8_t>> weight_bytes;  // storage behind weights[i].data
  std::map<BufferId, std::vector<float>> inputs;   // written into the backend before each run
  std::vector<int32_t> tokens;                     // the step's token ids (n_tokens)
  int64_t start_pos = 0;                           // the step's first position (one sequence)
  // The step-input buffers besides plan.tokens / plan.positions (KvRows, SeqIndex, PageTable).
  BufferId kv_rows = kNoBuffer, seq = kNoBuffer, page_table = kNoBuffer;
  // When set, run() uses these arrays instead of single_sequence_step(plan, tokens, start_pos).
  std::optional<StepArrays> step;

  // n_tokens tokens of up to n_seqs sequences of up to ctx positions each; the page pool holds n_seqs * ctx
  // positions plus the sink page.
  OpCase(int64_t n_tokens, int64_t ctx, int64_t n_seqs = 1);

  // A scratch input of uniform random values in [-scale, scale) (F16 buffers hold them rounded to f16, Q8_0 ones
  // quantized per 32: engine/kv_q8.h).
  BufferId input(const std::string& name, int64_t elems, uint32_t seed, float scale = 1.f,
                 ElemType type = ElemType::F32);

  // Several sequences in one step: sequence i has lens[i] tokens at positions starts[i]..; their pages are a random
  // permutation of the pool (never page 0), so kernels that ignore the page table fail. Tokens past the sum of lens
  // are padding (position 0, KV row 0, page-table row n_seqs - 1 mapped to the sink page; needs a spare row).
  // Sets `step`.
  void sequences(std::span<const int64_t> lens, std::span<const int64_t> starts, uint32_t seed);
  // The cache row of position `pos` of sequence row `s` in the current step (step or the single sequence).
  int64_t cache_row(int64_t s, int64_t pos) const;
  BufferId output(const std::string& name, int64_t elems);
  // A [rows, cols] weight of `type`: uniform random floats in [lo, hi) encoded with the reference quantizer.
  WeightId weight(const std::string& name, model::GgmlType type, int64_t rows, int64_t cols, uint32_t seed,
                  float lo = -1.f, float hi = 1.f);
  void add(std::string label, OpVariant op);

  // Loads the weights into a fresh backend and prepares the plan.
  std::unique_ptr<PreparedPlan> load_and_prepare(Backend& backend);
  // Writes the inputs and runs one step.
  void run(Backend& backend, PreparedPlan& prepared);
  std::vector<float> read(Backend& backend, PreparedPlan& prepared, BufferId buffer);
  // All three: a fresh backend in, the contents of `out` back.
  std::vector<float> run_once(Backend& backend, BufferId out);
};

// Evicts the GPU's last-level cache between timed runs: x += y over two 64 MiB buffers (more than any current L2),
// on the backend it was made for. Without it a weight that fits the L2 (a 4096 x 4096 Q4_0 matrix is 9 MB) is served
// from it on every repeated run, which the forward pass, streaming every weight once per step, never sees: the tuner
// (vk/backend/tuner.cpp) would pick tiles for the wrong reason, and a kernel bench (--cold-l2) times what a step sees.
// run() leaves the backend's op spans empty; the flush's own time is not added to any other plan's op_seconds.
class CacheFlush {
public:
  explicit CacheFlush(Backend& backend);
  void run();

private:
  Backend& backend_;
  std::unique_ptr<PreparedPlan> prepared_;
};

}  // namespace greta::engine
