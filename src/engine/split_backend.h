// A model spread over several backends by layers: consecutive transformer blocks on each (a layer split), which is
// both partial offload (the first blocks on a GPU, the rest on the CPU backend) and several GPUs (two Vulkan devices,
// two HIP devices, or two logical devices on one GPU). It is itself a Backend, so the engine, the scheduler and verify
// mode run on it unchanged; the children never know they are parts of something larger.
//
//   placement (engine/placement.h)   which backend runs each block; the token embedding goes with block 0, the final
//                                    norm and output projection with the last block
//   prepare(plan)                    cuts the plan into segments of consecutive ops on one backend and gives each
//                                    backend its segments as plans of their own, with only the buffers and weights
//                                    they name, renumbered. The first prepare() also loads each backend's weights:
//                                    only those its segments use (a tied output matrix lives on both ends).
//   execute(plan, step)              runs the segments in order; before a segment, each buffer it reads that another
//                                    backend wrote last (the residual stream, [n_tokens, dim] floats) is copied
//                                    through host memory: one hand-off per boundary, not per op
//
// Step inputs go to every segment that reads them (each backend copies them from the StepInput itself); persistent
// buffers (a layer's KV pages) exist only on that layer's backend.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/placement.h"

namespace greta::engine {

// Time spent handing activations from one backend to the next, since construction.
struct CrossingStats {
  int64_t copies = 0;      // buffers copied
  uint64_t bytes = 0;      // their size (as f32)
  double seconds = 0;      // wall time of the read-backs and uploads
};

class SplitBackend final : public Backend {
public:
  // backends[i] runs the blocks placement.layer_device says are i's. Throws greta::Error when the placement names a
  // backend that does not exist.
  SplitBackend(std::vector<std::unique_ptr<Backend>> backends, Placement placement);
  ~SplitBackend() override;

  std::string name() const override;
  uint64_t memory_capacity() const override { return placement_.memory_capacity; }
  void load_weights(std::span<const WeightDesc> weights) override;
  std::string weights_note() const override;  // its backends' notes, once each has loaded its part
  std::unique_ptr<PreparedPlan> prepare(const Plan& plan) override;
  void execute(PreparedPlan& plan, const StepInput& step, OpRange range) override;
  void read(PreparedPlan& plan, BufferId buffer, int64_t offset, std::span<float> dst) override;
  void write(PreparedPlan& plan, BufferId buffer, int64_t offset, std::span<const float> src) override;
  void set_profiling(bool on) override;

  const Placement& placement() const { return placement_; }
  size_t backend_count() const { return backends_.size(); }
  Backend& backend(size_t i) { return *backends_.at(i); }
  const CrossingStats& crossings() const { return crossings_; }

private:
  // [op] the backend that runs each op of `plan`.
  std::vector<int> op_backends(const Plan& plan) const;
  void load_children(const Plan& plan);

  std::vector<std::unique_ptr<Backend>> backends_;
  Placement placement_;
  std::vector<WeightDesc> weights_;       // the model's table, kept until the first plan says who needs what
  std::vector<std::vector<WeightId>> weight_ids_;  // [backend][model WeightId] -> the backend's id (kNoWeight: absent)
  bool loaded_ = false;
  CrossingStats crossings_;
};

}  // namespace greta::engine
