// The CPU reference backend: fp32 activations, weights used in place from the memory-mapped file (dequantized row
// by row through model/quants), a fixed thread pool, results independent of the thread count. Every other backend
// is checked against it (engine/verify.h). Clarity beats speed here.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "core/thread_pool.h"
#include "engine/backend.h"

namespace greta::cpu {

struct CpuOptions {
  int threads = 0;  // 0: one per hardware thread
  // Quantized / half-precision weights are decoded to fp32 once at load when all of them fit in this many bytes
  // (small models run several times faster); bigger models are decoded row by row at every step. The numbers are
  // the same either way: both paths use the same decoder and the same dot product.
  uint64_t decoded_weight_budget = uint64_t(256) << 20;
};

// The machine's physical memory (what the CPU backend reports as its capacity); 8 GiB when the system does not say.
uint64_t physical_memory_bytes();

// One plan buffer in host memory: exactly one of the vectors is used, by the buffer's element type.
struct HostBuffer {
  engine::ElemType type = engine::ElemType::F32;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  std::vector<uint16_t> f16;  // IEEE half bits
  std::vector<uint32_t> q8;   // Q8_0 blocks (engine/kv_q8.h)
  HostBuffer(engine::ElemType t, int64_t elems);
  int64_t elems() const;
};

// A plan's buffers on the CPU: one host allocation per scratch buffer; persistent buffers are shared with the
// backend (and every other plan of the model) by name.
class CpuPlan : public engine::PreparedPlan {
public:
  using engine::PreparedPlan::PreparedPlan;
  std::vector<std::shared_ptr<HostBuffer>> buffers;  // by BufferId
};

class CpuBackend : public engine::Backend {
public:
  explicit CpuBackend(const CpuOptions& options = {});

  std::string name() const override;
  uint64_t memory_capacity() const override;
  void load_weights(std::span<const engine::WeightDesc> weights) override;
  std::unique_ptr<engine::PreparedPlan> prepare(const engine::Plan& plan) override;
  void execute(engine::PreparedPlan& plan, const engine::StepInput& step, engine::OpRange range) override;
  using engine::Backend::execute;
  void read(engine::PreparedPlan& plan, engine::BufferId buffer, int64_t offset, std::span<float> dst) override;
  std::span<const float> view(engine::PreparedPlan& plan, engine::BufferId buffer, int64_t offset,
                              size_t count) override;
  void write(engine::PreparedPlan& plan, engine::BufferId buffer, int64_t offset, std::span<const float> src) override;

  int threads() const { return pool_.size(); }

protected:
  // Runs one op. Virtual so a test can derive a deliberately broken backend and show that verify mode and the
  // golden tests catch it.
  virtual void run_op(CpuPlan& plan, const engine::PlanOp& op);

  float* f32(CpuPlan& plan, engine::BufferId id);
  const int32_t* i32(CpuPlan& plan, engine::BufferId id);
  int32_t* i32_mut(CpuPlan& plan, engine::BufferId id);
  CacheView cache(CpuPlan& plan, engine::BufferId id);  // an F32 or F16 buffer as a KV cache
  const WeightView& weight(engine::WeightId id) const;
  const float* vector_weight(engine::WeightId id) const;  // a 1-row weight (norm, bias) as fp32
  ThreadPool& pool() { return pool_; }

private:
  ThreadPool pool_;
  CpuOptions options_;
  std::vector<WeightView> weights_;                 // by WeightId
  std::vector<std::vector<float>> vectors_;         // by WeightId: fp32 copies of the 1-row weights
  std::vector<std::vector<float>> decoded_;         // by WeightId: fp32 copies of matrices (within the budget)
  std::map<std::string, std::shared_ptr<HostBuffer>> persistent_;  // the KV page pool, by buffer name
};

}  // namespace greta::cpu
