#include "vk/backend/encoder.h"

#include <algorithm>

#include "core/error.h"

namespace greta::vk {

BufferSpan OpEncoder::buffer(engine::BufferId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < res_.buffers->size(), "buffer id ", id);
  return (*res_.buffers)[size_t(id)];
}

const DeviceWeight& OpEncoder::weight(engine::WeightId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < res_.weights->size(), "weight id ", id);
  return (*res_.weights)[size_t(id)];
}

BufferSpan OpEncoder::constant_buffer(const std::vector<float>& values, const std::string& name) {
  GRETA_CHECK(!values.empty(), name);
  Buffer b = res_.allocator->create_buffer(values.size() * sizeof(float), MemoryUse::device, name);
  res_.transfer->upload(b, values);
  res_.constants->push_back(std::move(b));
  return res_.constants->back().span();
}

BufferSpan OpEncoder::scratch_buffer(uint64_t bytes, const std::string& name) {
  res_.constants->push_back(res_.allocator->create_buffer(std::max<uint64_t>(bytes, 4), MemoryUse::device, name));
  return res_.constants->back().span();
}

const ComputePipeline& OpEncoder::pipeline(ShaderId id, std::initializer_list<SpecConstant> spec,
                                           const PipelineOptions& options) {
  return res_.pipelines->get(id, std::span<const SpecConstant>(spec.begin(), spec.size()), options);
}

void OpEncoder::dispatch(const ComputePipeline& p, std::initializer_list<BufferSpan> buffers,
                         std::span<const std::byte> push, std::array<uint32_t, 3> groups) {
  recorder_->dispatch(p, buffers, push, groups, label_);
}

uint32_t OpEncoder::groups_for(uint64_t items, uint32_t local) const {
  return group_count(items, local, info().max_workgroup_count[0]);
}

bool OpEncoder::has_coopmat_f16() const {
  const DeviceInfo& i = info();
  return features().cooperative_matrix && i.subgroup_ops_in_compute &&
         i.supports_coopmat(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR);
}

void OpEncoder::note_variant(const std::string& v) {
  if (!variant_) return;
  if (variant_->find(v) != std::string::npos) return;
  *variant_ += variant_->empty() ? v : " + " + v;
}

BufferSpan OpEncoder::f16_copy(engine::BufferId id, uint64_t elems) {
  GRETA_CHECK(elems > 0 && elems % 4 == 0, "f16 copy of ", elems, " values");
  if (f16_of_ == id && f16_elems_ >= elems) return {f16_span_.buffer, f16_span_.offset, elems * 2};
  if (f16_span_.size < elems * 2) f16_span_ = scratch_buffer(elems * 2, "f16 activations");
  barrier();  // GEMMs recorded earlier may still read the previous copy
  const BufferSpan src = buffer(id);
  GRETA_CHECK(src.size >= elems * 4, "f16 copy past the end of buffer ", id);
  const uint32_t count4 = to_u32(int64_t(elems / 4), "f16 activations");
  const auto& p = pipeline(ShaderId::convert_f16, {{0, kElementwiseWorkgroup}});
  dispatch(p, {BufferSpan{src.buffer, src.offset, elems * 4}, BufferSpan{f16_span_.buffer, f16_span_.offset, elems * 2}},
           as_push(count4), {groups_for(count4, kElementwiseWorkgroup), 1, 1});
  barrier();
  f16_of_ = id;
  f16_elems_ = elems;
  return {f16_span_.buffer, f16_span_.offset, elems * 2};
}

void OpEncoder::note_written(std::span<const engine::BufferId> writes) {
  if (f16_of_ && std::find(writes.begin(), writes.end(), *f16_of_) != writes.end()) f16_of_.reset();
}

}  // namespace greta::vk
