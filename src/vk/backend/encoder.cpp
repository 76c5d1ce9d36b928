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

}  // namespace greta::vk
