// Work submission: command buffers recorded once and resubmitted.
//
//   RecordedSequence seq(ctx, "layer", {.profile = true});
//   seq.record([&](Recorder& r) {
//     r.dispatch(pipelines.get(ShaderId::add_f32), {a, b, c}, as_push(params), {groups, 1, 1}, "add");
//     r.barrier();
//     r.copy(c, d);
//   });
//   for (...) { transfer.upload(a, ...); seq.submit(); }   // no re-recording; inputs change through the buffers
//   seq.wait(); auto t = seq.timings();
//
// Synchronisation model (simple on purpose): everything goes through the one compute queue, and every command buffer
// (sequences and transfers alike) starts with a full memory barrier, so each submission sees all earlier
// submissions' writes and cannot overwrite what they still read. Inside a sequence, operations may overlap unless
// separated by Recorder::barrier(). Completion is a timeline ticket (queue.h).
#pragma once
#include <volk.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vk/handles.h"
#include "vk/memory.h"
#include "vk/profiler.h"

namespace greta::vk {

class Context;
class ComputePipeline;

// Push-constant bytes of a trivially copyable struct (its layout must match the shader's push_constant block).
template <class T>
std::span<const std::byte> as_push(const T& value) {
  static_assert(std::is_trivially_copyable_v<T>, "push constants must be trivially copyable");
  return std::as_bytes(std::span<const T, 1>(&value, 1));
}

// Records a full memory barrier (all earlier commands' writes visible to, and ordered before, all later commands).
void record_full_barrier(const VolkDeviceTable& fn, VkCommandBuffer command_buffer);

// Operations collected by RecordedSequence::record; encoded into the command buffer when the callback returns (so
// query and descriptor pools can be sized exactly).
class Recorder {
public:
  // One dispatch: `buffers` bind to bindings 0..n-1 (the count must match the shader), `push` must be exactly the
  // shader's push-constant block size. Spans must be non-empty, within the binding range and offset-aligned.
  void dispatch(const ComputePipeline& pipeline, std::initializer_list<BufferSpan> buffers,
                std::span<const std::byte> push, std::array<uint32_t, 3> groups, std::string label = "");
  void dispatch(const ComputePipeline& pipeline, std::span<const BufferSpan> buffers, std::span<const std::byte> push,
                std::array<uint32_t, 3> groups, std::string label = "");
  // The same with the workgroup counts read from `args` (3 uint32, vkCmdDispatchIndirect) when the command runs, so
  // the host can change them between submissions of a recorded sequence; `max_groups` bounds them (checked here).
  void dispatch_indirect(const ComputePipeline& pipeline, std::span<const BufferSpan> buffers,
                         std::span<const std::byte> push, BufferSpan args, std::array<uint32_t, 3> max_groups,
                         std::string label = "");
  // Orders everything recorded before it against everything after it (memory and execution). With
  // `indirect_arguments`, the later indirect dispatches' argument reads too (after writing their arguments on the
  // device): only then, as a barrier that includes the indirect stage stalls the command processor on the H200 (a
  // Qwen3-30B-A3B-shaped decode took 25 % longer with it at every barrier).
  void barrier(bool indirect_arguments = false);
  // Nothing has been recorded since the last barrier (or at all): the next command starts with the device to itself.
  bool at_barrier() const { return ops_.empty() || ops_.back().kind == Kind::barrier; }
  // Barriers recorded so far: a command recorded when this read n is ordered before everything recorded once it
  // reads more.
  uint64_t barrier_count() const { return barriers_; }
  // vkCmdCopyBuffer; src and dst sizes must be equal.
  void copy(BufferSpan src, BufferSpan dst, std::string label = "copy");
  // vkCmdFillBuffer with a 32-bit pattern; offset and size must be multiples of 4.
  void fill(BufferSpan dst, uint32_t value, std::string label = "fill");

private:
  friend class RecordedSequence;
  enum class Kind { dispatch, barrier, copy, fill };
  struct Op {
    Kind kind;
    const ComputePipeline* pipeline = nullptr;
    std::vector<BufferSpan> buffers{};  // dispatch: bindings; copy: {src, dst}; fill: {dst}
    std::vector<std::byte> push{};
    std::array<uint32_t, 3> groups{};
    std::optional<BufferSpan> indirect{};  // dispatch: the workgroup counts' location (groups: their bounds)
    uint32_t fill_value = 0;
    bool indirect_arguments = false;  // barrier: also before indirect argument reads
    std::string label{};
  };
  explicit Recorder(const Context& context) : context_(&context) {}
  void check_span(const BufferSpan& span, const char* what) const;
  const Context* context_;
  std::vector<Op> ops_;
  uint64_t barriers_ = 0;
};

struct SequenceOptions {
  // Write GPU timestamps around every dispatch/copy/fill (ignored, with profiling() false, when the queue has none).
  bool profile = false;
  // Without profile: a timestamp at the start and one at the end of the whole recording (span_seconds()), so a run's
  // device time is known without serializing its dispatches as profiling does.
  bool span = false;
};

class RecordedSequence {
public:
  RecordedSequence(Context& context, std::string name, SequenceOptions options = {});
  ~RecordedSequence();  // waits for its own submissions: the command buffer must not be freed while in use
  RecordedSequence(const RecordedSequence&) = delete;
  RecordedSequence& operator=(const RecordedSequence&) = delete;

  // (Re)records the command buffer. Waits for earlier submissions of this sequence first.
  void record(const std::function<void(Recorder&)>& build);
  // Submits the recorded commands; may be called again before the previous submission finished (the leading barrier
  // orders them). Returns the ticket.
  uint64_t submit();
  void wait();          // for the latest submission
  void run() { submit(); wait(); }

  bool recorded() const { return recorded_; }
  size_t operation_count() const { return labels_.size(); }
  bool profiling() const { return query_pool_ ? true : false; }
  // GPU times of each timed operation of the latest submission (waits for it). Empty without profiling.
  std::vector<DispatchTiming> timings();
  // The latest submission's device time from its first command to its last (waits for it), with SequenceOptions::span
  // on a queue with timestamps; nothing otherwise.
  std::optional<double> span_seconds();
  const std::string& name() const { return name_; }

private:
  void encode(const Recorder& recorder);
  Context* context_;
  std::string name_;
  SequenceOptions options_;
  UniqueCommandPool pool_;
  VkCommandBuffer command_buffer_ = VK_NULL_HANDLE;
  std::vector<UniqueDescriptorPool> descriptor_pools_;  // fallback path without push descriptors
  UniqueQueryPool query_pool_;
  UniqueQueryPool span_pool_;  // SequenceOptions::span: the recording's first and last timestamps
  std::vector<std::string> labels_;  // one per timed operation, in order
  bool recorded_ = false;
  bool submitted_ = false;  // submitted since the last record()
  uint64_t last_ticket_ = 0;
};

}  // namespace greta::vk
