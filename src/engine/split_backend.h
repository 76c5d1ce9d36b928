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
// Pipelined passes: execute() posts each segment, and each hand-off's read and write, to the queue of the backend
// that runs it (device_queue.h, a thread per backend) and returns. The engine's next pass then starts on the first
// device while the last one still runs this pass, as llama.cpp's -sm layer pipelines a batch's micro-batches: a
// prompt of several passes, or many prompts at once, keeps every device busy. Each queue runs its backend's work in
// order, so a pass never overtakes the one before it on any device (the KV cache and the hand-off buffers see the
// passes in order); at most kPipelineDepth passes are in flight. read(), write(), prepare() and finish() wait for
// everything posted. A pass runs in the caller's thread when no pass follows it and none is in flight (a decode
// step: the wake-ups of the queues' threads cost 0.3 ms per token on the H200s), and so do profiled passes,
// verify's op ranges and a split of one backend.
//
// Step inputs go to every segment that reads them (each backend copies them from the StepInput itself); persistent
// buffers (a layer's KV pages) exist only on that layer's backend.
#pragma once
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/placement.h"

namespace greta::engine {

class SplitQueues;
class SplitPlan;
struct SplitSegment;

// Time spent handing activations from one backend to the next, since construction.
struct CrossingStats {
  int64_t copies = 0;      // buffers copied
  uint64_t bytes = 0;      // their size (as f32)
  double seconds = 0;      // wall time of the read-backs and uploads (with pipelined passes, partly hidden behind
                           // other devices' work)
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
  std::span<const float> view(PreparedPlan& plan, BufferId buffer, int64_t offset, size_t count) override;
  void write(PreparedPlan& plan, BufferId buffer, int64_t offset, std::span<const float> src) override;
  void finish() override;
  void set_profiling(bool on) override;

  const Placement& placement() const { return placement_; }
  size_t backend_count() const { return backends_.size(); }
  Backend& backend(size_t i) { return *backends_.at(i); }
  CrossingStats crossings() const;

  // Passes in flight at most (execute() waits for the oldest beyond it): two keep two devices busy, and bound the
  // hand-off buffers each plan keeps to two per hand-off.
  static constexpr size_t kPipelineDepth = 2;

private:
  // [op] the backend that runs each op of `plan`.
  std::vector<int> op_backends(const Plan& plan) const;
  void load_children(const Plan& plan);
  // execute() in the caller's thread, segment after segment.
  void execute_here(SplitPlan& p, const StepInput& step, OpRange range);
  // execute() of the whole plan through the backends' queues (see above).
  void post_pass(SplitPlan& p, const StepInput& step);
  static SplitSegment& holder(SplitPlan& p, BufferId buffer);
  void add_crossing(int64_t copies, uint64_t bytes, double seconds);

  std::vector<std::unique_ptr<Backend>> backends_;
  Placement placement_;
  std::vector<WeightDesc> weights_;       // the model's table, kept until the first plan says who needs what
  std::vector<std::vector<WeightId>> weight_ids_;  // [backend][model WeightId] -> the backend's id (kNoWeight: absent)
  bool loaded_ = false;
  mutable std::mutex crossings_mutex_;
  CrossingStats crossings_;
  std::shared_ptr<SplitQueues> queues_;         // a queue per backend; the plans hold it too (they wait on it)
  std::deque<std::shared_future<void>> in_flight_;  // the posted passes not yet waited for, oldest first
};

}  // namespace greta::engine
