#include "vk/memory.h"

#include <vk_mem_alloc.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "vk/check.h"
#include "vk/context.h"

namespace greta::vk {

namespace {

const char* use_name(MemoryUse use) {
  switch (use) {
    case MemoryUse::device: return "device-local";
    case MemoryUse::upload: return "upload staging";
    case MemoryUse::readback: return "readback staging";
    case MemoryUse::device_mapped: return "device-local, mapped";
  }
  return "?";
}

VmaAllocationCreateInfo allocation_info(MemoryUse use, bool within_budget) {
  VmaAllocationCreateInfo info{};
  switch (use) {
    case MemoryUse::device:
      info.usage = VMA_MEMORY_USAGE_AUTO_PREFER_DEVICE;
      // With VK_EXT_memory_budget, fail cleanly instead of oversubscribing (which pages or kills the process).
      if (within_budget) info.flags |= VMA_ALLOCATION_CREATE_WITHIN_BUDGET_BIT;
      break;
    case MemoryUse::upload:
      info.usage = VMA_MEMORY_USAGE_AUTO_PREFER_HOST;
      info.flags = VMA_ALLOCATION_CREATE_HOST_ACCESS_SEQUENTIAL_WRITE_BIT | VMA_ALLOCATION_CREATE_MAPPED_BIT;
      break;
    case MemoryUse::device_mapped:
      info.usage = VMA_MEMORY_USAGE_AUTO_PREFER_DEVICE;
      info.flags = VMA_ALLOCATION_CREATE_HOST_ACCESS_SEQUENTIAL_WRITE_BIT | VMA_ALLOCATION_CREATE_MAPPED_BIT;
      if (within_budget) info.flags |= VMA_ALLOCATION_CREATE_WITHIN_BUDGET_BIT;
      break;
    case MemoryUse::readback:
      info.usage = VMA_MEMORY_USAGE_AUTO_PREFER_HOST;
      info.flags = VMA_ALLOCATION_CREATE_HOST_ACCESS_RANDOM_BIT | VMA_ALLOCATION_CREATE_MAPPED_BIT;
      break;
  }
  return info;
}

VkBufferCreateInfo buffer_info(uint64_t size) {
  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = size;
  // Indirect: dispatch sizes the host writes per step (decode attention's key splits, commands.h).
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
               VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  return info;
}

std::string quoted(const std::string& name) { return name.empty() ? std::string("buffer") : cat("buffer '", name, "'"); }

}  // namespace

// --- Buffer ---------------------------------------------------------------------------------------------------------

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    allocator_ = std::exchange(other.allocator_, nullptr);
    allocation_ = std::exchange(other.allocation_, nullptr);
    buffer_ = std::exchange(other.buffer_, VK_NULL_HANDLE);
    size_ = std::exchange(other.size_, 0);
    use_ = other.use_;
    mapped_ = std::exchange(other.mapped_, nullptr);
    device_bytes_ = std::exchange(other.device_bytes_, nullptr);
  }
  return *this;
}

void Buffer::release() {
  if (buffer_ != VK_NULL_HANDLE) vmaDestroyBuffer(allocator_, buffer_, allocation_);
  if (device_bytes_) *device_bytes_ -= size_;
  device_bytes_ = nullptr;
  buffer_ = VK_NULL_HANDLE;
  allocation_ = nullptr;
  mapped_ = nullptr;
  size_ = 0;
}

BufferSpan Buffer::span(uint64_t offset, uint64_t size) const {
  if (offset > size_ || size > size_ - offset)
    fail("span [", offset, ", ", offset + size, ") is outside a buffer of ", size_, " bytes");
  return {buffer_, offset, size};
}

void Buffer::flush(uint64_t offset, uint64_t size) const {
  GRETA_CHECK(mapped_ != nullptr, "flush on an unmapped buffer");
  GRETA_VK_CHECK(vmaFlushAllocation(allocator_, allocation_, offset, size));
}

void Buffer::invalidate(uint64_t offset, uint64_t size) const {
  GRETA_CHECK(mapped_ != nullptr, "invalidate on an unmapped buffer");
  GRETA_VK_CHECK(vmaInvalidateAllocation(allocator_, allocation_, offset, size));
}

// --- split planning -------------------------------------------------------------------------------------------------

std::vector<uint64_t> plan_chunks(uint64_t total_bytes, uint64_t granule_bytes, uint64_t max_chunk_bytes) {
  if (granule_bytes == 0) fail("split buffer granule must be at least 1 byte");
  if (granule_bytes > max_chunk_bytes)
    fail("one granule (row) of ", granule_bytes, " bytes is larger than the largest bindable range (",
         max_chunk_bytes, " bytes)");
  // Chunks are whole granules; also keep them a multiple of 4 bytes (vkCmdFillBuffer and 32-bit shader access) when
  // a granule allows it.
  uint64_t unit = std::lcm(granule_bytes, uint64_t(4));
  if (unit > max_chunk_bytes) unit = granule_bytes;
  const uint64_t chunk = max_chunk_bytes / unit * unit;
  std::vector<uint64_t> sizes;
  for (uint64_t done = 0; done < total_bytes;) {
    const uint64_t n = std::min(chunk, total_bytes - done);
    sizes.push_back(n);
    done += n;
  }
  return sizes;
}

// --- SplitBuffer ----------------------------------------------------------------------------------------------------

size_t SplitBuffer::chunk_of(uint64_t offset) const {
  if (offset >= size_) fail("offset ", offset, " is outside a split buffer of ", size_, " bytes");
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), offset);
  return size_t(it - offsets_.begin()) - 1;
}

BufferSpan SplitBuffer::span(uint64_t offset, uint64_t size) const {
  if (size == 0 || offset > size_ || size > size_ - offset)
    fail("span [", offset, ", ", offset + size, ") is outside a split buffer of ", size_, " bytes");
  const size_t i = chunk_of(offset);
  const uint64_t local = offset - offsets_[i];
  if (size > chunks_[i].size() - local)
    fail("span [", offset, ", ", offset + size, ") straddles chunks ", i, " and ", i + 1, " (chunk ", i, " ends at ",
         offsets_[i] + chunks_[i].size(), "); bind it as two spans");
  return {chunks_[i].handle(), local, size};
}

std::vector<std::pair<uint64_t, BufferSpan>> SplitBuffer::pieces(uint64_t offset, uint64_t size) const {
  if (offset > size_ || size > size_ - offset)
    fail("range [", offset, ", ", offset + size, ") is outside a split buffer of ", size_, " bytes");
  std::vector<std::pair<uint64_t, BufferSpan>> out;
  while (size > 0) {
    const size_t i = chunk_of(offset);
    const uint64_t local = offset - offsets_[i];
    const uint64_t n = std::min(size, chunks_[i].size() - local);
    out.push_back({offset, BufferSpan{chunks_[i].handle(), local, n}});
    offset += n;
    size -= n;
  }
  return out;
}

// --- Allocator ------------------------------------------------------------------------------------------------------

Allocator::Allocator(Context& context) : context_(&context) {
  VmaVulkanFunctions functions{};
  functions.vkGetInstanceProcAddr = vkGetInstanceProcAddr;
  functions.vkGetDeviceProcAddr = vkGetDeviceProcAddr;
  VmaAllocatorCreateInfo info{};
  info.physicalDevice = context.physical_device();
  info.device = context.device();
  info.instance = context.instance().handle();
  info.vulkanApiVersion = std::min(context.info().api_version, context.instance().api_version());
  info.pVulkanFunctions = &functions;
  if (context.features().memory_budget) info.flags |= VMA_ALLOCATOR_CREATE_EXT_MEMORY_BUDGET_BIT;
  VmaAllocator allocator = nullptr;
  GRETA_VK_CHECK(vmaCreateAllocator(&info, &allocator));
  allocator_ = allocator;
}

Allocator::~Allocator() {
  if (allocator_) vmaDestroyAllocator(allocator_);
}

uint64_t Allocator::max_chunk_bytes() const {
  return std::min(context_->max_binding_range(), context_->max_allocation_size());
}

std::vector<HeapBudget> Allocator::budgets() const {
  const VkPhysicalDeviceMemoryProperties* props = nullptr;
  vmaGetMemoryProperties(allocator_, &props);
  std::vector<VmaBudget> raw(props->memoryHeapCount);
  vmaGetHeapBudgets(allocator_, raw.data());
  std::vector<HeapBudget> out;
  for (uint32_t h = 0; h < props->memoryHeapCount; ++h) {
    HeapBudget b;
    b.heap = h;
    b.device_local = (props->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    b.size = props->memoryHeaps[h].size;
    b.budget = raw[h].budget;
    b.usage = raw[h].usage;
    out.push_back(b);
  }
  return out;
}

uint32_t Allocator::heap_for(uint64_t size, MemoryUse use) const {
  const VkBufferCreateInfo bi = buffer_info(size);
  const VmaAllocationCreateInfo ai = allocation_info(use, false);
  uint32_t type = 0;
  GRETA_VK_CHECK(vmaFindMemoryTypeIndexForBufferInfo(allocator_, &bi, &ai, &type));
  const VkPhysicalDeviceMemoryProperties* props = nullptr;
  vmaGetMemoryProperties(allocator_, &props);
  return props->memoryTypes[type].heapIndex;
}

void Allocator::fail_out_of_memory(uint64_t size, MemoryUse use, const std::string& name, VkResult result) const {
  const uint32_t heap = heap_for(std::min<uint64_t>(size, 1 << 20), use);
  const HeapBudget b = budgets().at(heap);
  fail(result == VK_ERROR_OUT_OF_HOST_MEMORY ? "out of host memory" : "out of device memory", " allocating ",
       quoted(name), " (", use_name(use), ") on ", context_->info().name, ": requested ", format_bytes(double(size)),
       "; heap ", heap, " has ",
       format_bytes(double(b.size)), ", budget ", format_bytes(double(b.budget)), ", in use ",
       format_bytes(double(b.usage)));
}

Buffer Allocator::create_buffer(uint64_t size, MemoryUse use, const std::string& name) {
  if (size == 0) fail("cannot create ", quoted(name), " of 0 bytes");
  const uint64_t max_alloc = context_->max_allocation_size();
  if (size > max_alloc)
    fail("cannot allocate ", quoted(name), " of ", format_bytes(double(size)), " (", size,
         " bytes) in one piece: the device's largest allocation is ", format_bytes(double(max_alloc)),
         "; use a split buffer");
  // Size against the heap first: VMA would just say "out of memory" for a request that can never fit.
  const uint32_t heap = heap_for(std::min<uint64_t>(size, 1 << 20), use);
  const HeapBudget b = budgets().at(heap);
  if (size > b.size)
    fail("cannot allocate ", quoted(name), " (", use_name(use), ") on ", context_->info().name, ": requested ",
         format_bytes(double(size)), " but heap ", heap, " has only ", format_bytes(double(b.size)), " (budget ", format_bytes(double(b.budget)),
         ", in use ", format_bytes(double(b.usage)), ")");

  const bool device_use = use == MemoryUse::device || use == MemoryUse::device_mapped;
  if (device_use && device_limit_ > 0 && device_bytes_in_use() + size > device_limit_)
    fail("out of device memory allocating ", quoted(name), " on ", context_->info().name, ": requested ",
         format_bytes(double(size)), ", in use ", format_bytes(double(device_bytes_in_use())), " of the ",
         format_bytes(double(device_limit_)), " the device memory limit allows");

  const VkBufferCreateInfo bi = buffer_info(size);
  const VmaAllocationCreateInfo ai = allocation_info(use, context_->features().memory_budget);
  VkBuffer buffer = VK_NULL_HANDLE;
  VmaAllocation allocation = nullptr;
  VmaAllocationInfo info{};
  const VkResult result = vmaCreateBuffer(allocator_, &bi, &ai, &buffer, &allocation, &info);
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY)
    fail_out_of_memory(size, use, name, result);
  GRETA_VK_CHECK(result);

  Buffer out;
  out.allocator_ = allocator_;
  out.allocation_ = allocation;
  out.buffer_ = buffer;
  out.size_ = size;
  out.use_ = use;
  out.mapped_ = use == MemoryUse::device ? nullptr : info.pMappedData;
  if (device_use) {
    out.device_bytes_ = device_bytes_.get();
    *out.device_bytes_ += size;
  }
  if (use != MemoryUse::device) GRETA_CHECK(out.mapped_ != nullptr, "VMA returned an unmapped staging buffer");
  if (!name.empty()) {
    vmaSetAllocationName(allocator_, allocation, name.c_str());
    context_->set_object_name(VK_OBJECT_TYPE_BUFFER, uint64_t(buffer), name.c_str());
  }
  return out;
}

SplitBuffer Allocator::create_split_buffer(uint64_t size, uint64_t granule, const std::string& name, MemoryUse use) {
  if (size == 0) fail("cannot create split ", quoted(name), " of 0 bytes");
  const DeviceInfo& info = context_->info();
  const uint64_t device_local = use == MemoryUse::device_mapped && info.unified_memory() ? info.unified_bytes()
                                                                                         : info.device_local_bytes();
  if (device_local && size > device_local)
    fail("cannot allocate split ", quoted(name), " on ", info.name, ": requested ", format_bytes(double(size)), " (", size,
         " bytes) but the largest device-local heap has only ", format_bytes(double(device_local)));
  SplitBuffer out;
  out.size_ = size;
  out.granule_ = granule;
  uint64_t offset = 0;
  const auto sizes = plan_chunks(size, granule, max_chunk_bytes());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string chunk_name = sizes.size() == 1 ? name : cat(name.empty() ? "split" : name, "[", i, "]");
    out.chunks_.push_back(create_buffer(sizes[i], use, chunk_name));
    out.offsets_.push_back(offset);
    offset += sizes[i];
  }
  return out;
}

}  // namespace greta::vk
