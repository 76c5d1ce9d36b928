#include "vk/commands.h"

#include <algorithm>

#include "core/error.h"
#include "vk/check.h"
#include "vk/context.h"
#include "vk/pipelines.h"

namespace greta::vk {

void record_full_barrier(const VolkDeviceTable& fn, VkCommandBuffer command_buffer) {
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  fn.vkCmdPipelineBarrier(command_buffer, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1,
                          &barrier, 0, nullptr, 0, nullptr);
}

namespace {

// Between operations of one sequence: compute and transfer work; with `indirect_arguments` also the indirect
// dispatches' argument reads (Recorder::barrier).
void record_compute_barrier(const VolkDeviceTable& fn, VkCommandBuffer command_buffer, bool indirect_arguments) {
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                          VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags src = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  VkPipelineStageFlags dst = src;
  if (indirect_arguments) {
    barrier.dstAccessMask |= VK_ACCESS_INDIRECT_COMMAND_READ_BIT;
    dst |= VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT;
  }
  fn.vkCmdPipelineBarrier(command_buffer, src, dst, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

// At the end of every sequence: its results are visible to the host after the fence wait (logits copied into a
// mapped read-back buffer inside the sequence are read without another submission).
void record_host_barrier(const VolkDeviceTable& fn, VkCommandBuffer command_buffer) {
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  fn.vkCmdPipelineBarrier(command_buffer, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                          VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

}  // namespace

// --- Recorder -------------------------------------------------------------------------------------------------------

void Recorder::check_span(const BufferSpan& span, const char* what) const {
  if (span.buffer == VK_NULL_HANDLE) fail(what, ": null buffer");
  if (span.size == 0) fail(what, ": empty span");
}

void Recorder::dispatch(const ComputePipeline& pipeline, std::initializer_list<BufferSpan> buffers,
                        std::span<const std::byte> push, std::array<uint32_t, 3> groups, std::string label) {
  dispatch(pipeline, std::span<const BufferSpan>(buffers.begin(), buffers.size()), push, groups, std::move(label));
}

void Recorder::dispatch(const ComputePipeline& pipeline, std::span<const BufferSpan> buffers,
                        std::span<const std::byte> push, std::array<uint32_t, 3> groups, std::string label) {
  const DeviceInfo& info = context_->info();
  const std::string& name = pipeline.name();
  if (buffers.size() != pipeline.binding_count())
    fail("dispatch of ", name, ": ", buffers.size(), " buffers given, the shader has ", pipeline.binding_count(),
         " bindings");
  if (push.size() != pipeline.push_constant_bytes())
    fail("dispatch of ", name, ": ", push.size(), " bytes of push constants given, the shader's block has ",
         pipeline.push_constant_bytes());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferSpan& s = buffers[i];
    check_span(s, name.c_str());
    if (s.size > context_->max_binding_range())
      fail("dispatch of ", name, ": binding ", i, " covers ", s.size, " bytes, more than the device's binding range (",
           context_->max_binding_range(), "); split the buffer (memory.h: SplitBuffer)");
    if (s.offset % info.min_storage_buffer_offset_alignment != 0)
      fail("dispatch of ", name, ": binding ", i, " offset ", s.offset, " is not a multiple of ",
           info.min_storage_buffer_offset_alignment, " (minStorageBufferOffsetAlignment)");
  }
  for (int i = 0; i < 3; ++i)
    if (groups[i] > info.max_workgroup_count[i])
      fail("dispatch of ", name, ": ", groups[i], " workgroups along dimension ", i, " exceed the device's ",
           info.max_workgroup_count[i]);
  Op op{Kind::dispatch};
  op.pipeline = &pipeline;
  op.buffers.assign(buffers.begin(), buffers.end());
  op.push.assign(push.begin(), push.end());
  op.groups = groups;
  op.label = label.empty() ? name : std::move(label);
  ops_.push_back(std::move(op));
}

void Recorder::dispatch_indirect(const ComputePipeline& pipeline, std::span<const BufferSpan> buffers,
                                 std::span<const std::byte> push, BufferSpan args,
                                 std::array<uint32_t, 3> max_groups, std::string label) {
  check_span(args, "indirect dispatch arguments");
  if (args.size < 12 || args.offset % 4 != 0) fail("indirect dispatch arguments: 12 bytes at a multiple of 4 needed");
  dispatch(pipeline, buffers, push, max_groups, std::move(label));
  ops_.back().indirect = args;
}

void Recorder::barrier(bool indirect_arguments) {
  if (!ops_.empty() && ops_.back().kind != Kind::barrier) {
    ops_.push_back(Op{.kind = Kind::barrier, .indirect_arguments = indirect_arguments});
    ++barriers_;
  } else if (!ops_.empty()) {
    ops_.back().indirect_arguments = ops_.back().indirect_arguments || indirect_arguments;
  }
}

void Recorder::copy(BufferSpan src, BufferSpan dst, std::string label) {
  check_span(src, "copy source");
  check_span(dst, "copy destination");
  if (src.size != dst.size) fail("copy of ", src.size, " bytes into a span of ", dst.size);
  Op op{Kind::copy};
  op.buffers = {src, dst};
  op.label = std::move(label);
  ops_.push_back(std::move(op));
}

void Recorder::fill(BufferSpan dst, uint32_t value, std::string label) {
  check_span(dst, "fill");
  if (dst.offset % 4 != 0 || dst.size % 4 != 0)
    fail("fill: offset ", dst.offset, " and size ", dst.size, " must be multiples of 4");
  Op op{Kind::fill};
  op.buffers = {dst};
  op.fill_value = value;
  op.label = std::move(label);
  ops_.push_back(std::move(op));
}

// --- RecordedSequence -----------------------------------------------------------------------------------------------

RecordedSequence::RecordedSequence(Context& context, std::string name, SequenceOptions options)
    : context_(&context), name_(std::move(name)), options_(options) {
  const DeviceDispatch& d = context.dispatch();
  auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pool_info.queueFamilyIndex = context.queue().family();
  VkCommandPool pool = VK_NULL_HANDLE;
  GRETA_VK_CHECK(d.fn.vkCreateCommandPool(d.device, &pool_info, nullptr, &pool));
  pool_ = UniqueCommandPool(d, pool);
  auto alloc = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  alloc.commandPool = pool;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  GRETA_VK_CHECK(d.fn.vkAllocateCommandBuffers(d.device, &alloc, &command_buffer_));
  context.set_object_name(VK_OBJECT_TYPE_COMMAND_BUFFER, uint64_t(command_buffer_), name_.c_str());
}

RecordedSequence::~RecordedSequence() {
  try {
    wait();
  } catch (...) {
    // A lost device: nothing more can be done; the Context's teardown waits for the device anyway.
  }
}

void RecordedSequence::wait() { context_->queue().wait(last_ticket_); }

void RecordedSequence::record(const std::function<void(Recorder&)>& build) {
  Recorder recorder(*context_);
  build(recorder);
  wait();  // the command buffer, its descriptor sets and queries must be idle before re-recording
  recorded_ = false;
  submitted_ = false;
  encode(recorder);
  recorded_ = true;
}

void RecordedSequence::encode(const Recorder& recorder) {
  const DeviceDispatch& d = context_->dispatch();
  const auto& fn = d.fn;
  GRETA_VK_CHECK(fn.vkResetCommandPool(d.device, pool_.get(), 0));
  descriptor_pools_.clear();
  labels_.clear();

  // Size the per-sequence pools from the recorded operations.
  uint32_t timed = 0, pool_sets = 0, pool_descriptors = 0;
  for (const auto& op : recorder.ops_) {
    if (op.kind != Recorder::Kind::barrier) ++timed;
    if (op.kind == Recorder::Kind::dispatch && !op.pipeline->uses_push_descriptors() && !op.buffers.empty()) {
      ++pool_sets;
      pool_descriptors += uint32_t(op.buffers.size());
    }
  }
  const bool timestamps = context_->info().timestamp_valid_bits > 0;
  const bool profile = options_.profile && timestamps && timed > 0;
  const bool span = options_.span && !profile && timestamps;
  const auto timestamp_pool = [&](uint32_t count) {
    auto qi = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = count;
    VkQueryPool qp = VK_NULL_HANDLE;
    GRETA_VK_CHECK(fn.vkCreateQueryPool(d.device, &qi, nullptr, &qp));
    return UniqueQueryPool(d, qp);
  };
  query_pool_ = profile ? timestamp_pool(2 * timed) : UniqueQueryPool();
  span_pool_ = span ? timestamp_pool(2) : UniqueQueryPool();
  VkDescriptorPool descriptor_pool = VK_NULL_HANDLE;
  if (pool_sets > 0) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pool_descriptors};
    auto pi = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    pi.maxSets = pool_sets;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &size;
    GRETA_VK_CHECK(fn.vkCreateDescriptorPool(d.device, &pi, nullptr, &descriptor_pool));
    descriptor_pools_.emplace_back(d, descriptor_pool);
  }

  // SIMULTANEOUS_USE: the same recording may be submitted again before the previous submission finished.
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;
  const VkCommandBuffer cb = command_buffer_;
  GRETA_VK_CHECK(fn.vkBeginCommandBuffer(cb, &begin));
  if (profile) fn.vkCmdResetQueryPool(cb, query_pool_.get(), 0, 2 * timed);
  if (span) fn.vkCmdResetQueryPool(cb, span_pool_.get(), 0, 2);
  record_full_barrier(fn, cb);
  if (span) fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, span_pool_.get(), 0);

  const ComputePipeline* bound = nullptr;
  uint32_t query = 0;
  std::vector<VkDescriptorBufferInfo> infos;
  std::vector<VkWriteDescriptorSet> writes;
  for (const auto& op : recorder.ops_) {
    if (op.kind == Recorder::Kind::barrier) {
      record_compute_barrier(fn, cb, op.indirect_arguments);
      continue;
    }
    if (op.kind == Recorder::Kind::dispatch) {
      const ComputePipeline& p = *op.pipeline;
      if (bound != &p) {
        fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.handle());
        bound = &p;
      }
      if (!op.buffers.empty()) {
        infos.clear();
        writes.clear();
        for (const auto& s : op.buffers) infos.push_back({s.buffer, s.offset, s.size});
        VkDescriptorSet set = VK_NULL_HANDLE;
        if (!p.uses_push_descriptors()) {
          VkDescriptorSetLayout layout = p.set_layout();
          auto ai = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
          ai.descriptorPool = descriptor_pool;
          ai.descriptorSetCount = 1;
          ai.pSetLayouts = &layout;
          GRETA_VK_CHECK(fn.vkAllocateDescriptorSets(d.device, &ai, &set));
        }
        for (uint32_t b = 0; b < infos.size(); ++b) {
          auto w = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
          w.dstSet = set;
          w.dstBinding = b;
          w.descriptorCount = 1;
          w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
          w.pBufferInfo = &infos[b];
          writes.push_back(w);
        }
        if (p.uses_push_descriptors()) {
          fn.vkCmdPushDescriptorSetKHR(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0, uint32_t(writes.size()),
                                       writes.data());
        } else {
          fn.vkUpdateDescriptorSets(d.device, uint32_t(writes.size()), writes.data(), 0, nullptr);
          fn.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0, 1, &set, 0, nullptr);
        }
      }
      if (!op.push.empty()) {
        // The range is rounded up to 4 bytes; push the block padded likewise.
        std::vector<std::byte> padded(op.push);
        padded.resize((padded.size() + 3) / 4 * 4);
        fn.vkCmdPushConstants(cb, p.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, uint32_t(padded.size()), padded.data());
      }
    }
    if (profile) fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, query_pool_.get(), query);
    switch (op.kind) {
      case Recorder::Kind::dispatch:
        if (op.indirect) fn.vkCmdDispatchIndirect(cb, op.indirect->buffer, op.indirect->offset);
        else fn.vkCmdDispatch(cb, op.groups[0], op.groups[1], op.groups[2]);
        break;
      case Recorder::Kind::copy: {
        const VkBufferCopy region{op.buffers[0].offset, op.buffers[1].offset, op.buffers[0].size};
        fn.vkCmdCopyBuffer(cb, op.buffers[0].buffer, op.buffers[1].buffer, 1, &region);
        break;
      }
      case Recorder::Kind::fill:
        fn.vkCmdFillBuffer(cb, op.buffers[0].buffer, op.buffers[0].offset, op.buffers[0].size, op.fill_value);
        break;
      case Recorder::Kind::barrier: break;
    }
    if (profile) fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_.get(), query + 1);
    query += 2;
    labels_.push_back(op.label);
  }
  if (span) fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, span_pool_.get(), 1);
  record_host_barrier(fn, cb);
  GRETA_VK_CHECK(fn.vkEndCommandBuffer(cb));
}

uint64_t RecordedSequence::submit() {
  if (!recorded_) fail("sequence '", name_, "' submitted before it was recorded");
  last_ticket_ = context_->queue().submit(command_buffer_);
  submitted_ = true;
  return last_ticket_;
}

std::optional<double> RecordedSequence::span_seconds() {
  if (!span_pool_ || !submitted_) return std::nullopt;
  wait();
  const DeviceDispatch& d = context_->dispatch();
  uint64_t ticks[2] = {};
  GRETA_VK_CHECK(d.fn.vkGetQueryPoolResults(d.device, span_pool_.get(), 0, 2, sizeof ticks, ticks, sizeof(uint64_t),
                                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const DeviceInfo& info = context_->info();
  const auto t = timings_from_ticks({"span"}, ticks, info.timestamp_valid_bits, info.timestamp_period_ns);
  return t.empty() ? std::nullopt : std::optional<double>(t[0].duration_ns() * 1e-9);
}

std::vector<DispatchTiming> RecordedSequence::timings() {
  if (!query_pool_ || !submitted_) return {};  // queries of this recording were never written
  wait();
  const DeviceDispatch& d = context_->dispatch();
  std::vector<uint64_t> ticks(2 * labels_.size());
  GRETA_VK_CHECK(d.fn.vkGetQueryPoolResults(d.device, query_pool_.get(), 0, uint32_t(ticks.size()),
                                            ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const DeviceInfo& info = context_->info();
  return timings_from_ticks(labels_, ticks.data(), info.timestamp_valid_bits, info.timestamp_period_ns);
}

}  // namespace greta::vk
