// The backend interface: everything the engine asks of a compute device. A backend (CPU reference, Vulkan, HIP)
// implements it without the engine knowing which one it is; the engine never includes a device API header.
//
// Life of a model on a backend:
//   load_weights(table)   once: the GGUF tensors in their native (possibly quantized) format; WeightId = table index.
//                         A GPU backend uploads them as they are and dequantizes inside its kernels.
//   prepare(plan)         once per plan shape: allocate the plan's scratch buffers, find or create its persistent
//                         buffers (the KV page pool, shared by every plan by name; enlarged, contents kept, when a
//                         plan declares it larger), compile/record whatever it wants.
//   execute(prepared, s)  every step: copy the step-input spans (tokens, positions, KV rows, sequence rows, page
//                         table, logit rows: plan.h) into the plan's buffers of those roles and run the ops in order.
//   read(prepared, ...)   fetch results (the logits buffer; any buffer in verify mode).
// The engine owns the KV cache's pages and schedules the steps; a backend only executes what a plan says.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/plan.h"
#include "model/tensor_types.h"

namespace greta::engine {

// One weight tensor as stored in the file: `rows` rows of `cols` elements of `type`, row-major, rows packed
// back to back (row_bytes(type, cols) each). `data` points into the memory-mapped GGUF file, which outlives the
// backend's use of it (the Engine owns both); a backend may keep the pointer or copy the bytes.
struct WeightDesc {
  std::string name;  // "blk.0.attn_q.weight"
  model::GgmlType type = model::GgmlType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  uint64_t bytes = 0;
  // Set when `data` lies in a memory-mapped file: a backend that copied the bytes into memory of its own calls it
  // (release(data, bytes)) so the file's pages leave the process's resident memory; they are read from the file
  // again if anything touches them later. On an integrated GPU the copy is in the same RAM: without this, loading
  // would hold the model twice. Its presence also says that `data` is a read-only file mapping that outlives the
  // backend, which a backend that can may use in place instead (then it does not call it).
  void (*release)(const void* data, uint64_t bytes) = nullptr;
};

// A plan made ready on one backend. Backends derive from it to keep their buffers and recorded work.
class PreparedPlan {
public:
  explicit PreparedPlan(Plan plan) : plan_(std::move(plan)), op_seconds_(plan_.ops.size(), 0.0) {}
  virtual ~PreparedPlan() = default;
  PreparedPlan(const PreparedPlan&) = delete;
  PreparedPlan& operator=(const PreparedPlan&) = delete;

  const Plan& plan() const { return plan_; }
  // Accumulated seconds per op (index = op index) while the backend's profiling is on; zeros otherwise.
  const std::vector<double>& op_seconds() const { return op_seconds_; }
  std::vector<double>& mutable_op_seconds() { return op_seconds_; }
  // While profiling, the backend also appends one span per op run, in steady_clock nanoseconds (device timestamps
  // placed on the host clock at submission); the engine drains them into its trace, if any, after each step.
  struct OpSpan {
    size_t op;
    int64_t start_ns, end_ns;
  };
  std::vector<OpSpan>& op_spans() { return op_spans_; }
  // Without profiling and with Backend::set_step_timing, a backend that can measure it cheaply (two timestamps or
  // events, nothing serialized) leaves the device time of each execute() here, from its first command to its last;
  // the engine takes it once.
  void set_run_device_seconds(double s) { run_device_s_ = s; }
  std::optional<double> take_run_device_seconds() { return std::exchange(run_device_s_, std::nullopt); }

private:
  Plan plan_;
  std::vector<double> op_seconds_;
  std::vector<OpSpan> op_spans_;
  std::optional<double> run_device_s_;
};

struct OpRange {
  size_t begin = 0, end = 0;  // [begin, end) op indices
};

class Backend {
public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu (2 threads)", "vulkan: NVIDIA H100"
  // Bytes the backend can hold (weights + buffers + KV cache): the engine caps the context by it.
  virtual uint64_t memory_capacity() const = 0;

  // Called once, before any prepare(). WeightId i refers to weights[i].
  virtual void load_weights(std::span<const WeightDesc> weights) = 0;

  // After load_weights: how the weights are held when that is worth a line at load ("weights: 4.6 GiB used in
  // place from the mapped file (imported host memory)"); empty otherwise.
  virtual std::string weights_note() const { return ""; }

  virtual std::unique_ptr<PreparedPlan> prepare(const Plan& plan) = 0;

  // Runs ops [range.begin, range.end) of the plan for this step (verify mode runs one op at a time; the engine runs
  // them all). The step input must match the plan: each span as long as the plan's buffer of its role, every token
  // < vocab, every KV row and page id inside the pool (the engine checks these and reports user errors before
  // calling; backends check the lengths).
  virtual void execute(PreparedPlan& plan, const StepInput& step, OpRange range) = 0;
  void execute(PreparedPlan& plan, const StepInput& step) { execute(plan, step, {0, plan.plan().ops.size()}); }

  // Copy elements [offset, offset + dst.size()) of an F32 or F16 buffer out of / into the backend (F16 converted to
  // and from float, round to nearest even).
  virtual void read(PreparedPlan& plan, BufferId buffer, int64_t offset, std::span<float> dst) = 0;
  virtual void write(PreparedPlan& plan, BufferId buffer, int64_t offset, std::span<const float> src) = 0;
  // Elements [offset, offset + count) of an F32 buffer in host memory the backend owns, to be read in place: valid
  // until the next execute() of the plan. Empty where the backend has no such memory for the buffer; the engine then
  // copies with read(). (The Vulkan backend's logits come back to mapped memory; the CPU backend's buffers are host
  // memory.)
  virtual std::span<const float> view(PreparedPlan& plan, BufferId buffer, int64_t offset, size_t count) {
    (void)plan, (void)buffer, (void)offset, (void)count;
    return {};
  }

  // Waits for work execute() left running. A backend may return from execute() before its work is done (a layer
  // split posts each device's part to that device's queue, so that one device starts the next pass while another
  // finishes this one); read() and prepare() wait for it themselves, and the engine calls finish() at the end of
  // every step. The default: execute() finishes its work before it returns.
  virtual void finish() {}

  // Per-op timing into PreparedPlan::op_seconds (a GPU backend uses timestamps). Off by default.
  virtual void set_profiling(bool on) { profiling_ = on; }
  bool profiling() const { return profiling_; }
  // Each execute()'s device time, first command to last, into PreparedPlan::set_run_device_seconds where the backend
  // can measure it without serializing anything (two timestamps or events); off by default, so that a step pays
  // nothing for it unless a bench asks.
  void set_step_timing(bool on) { step_timing_ = on; }
  bool step_timing() const { return step_timing_; }

protected:
  bool profiling_ = false;
  bool step_timing_ = false;
};

}  // namespace greta::engine
