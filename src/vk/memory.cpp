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
    imported_memory_ = std::move(other.imported_memory_);
    imported_buffer_ = std::move(other.imported_buffer_);
    offset_ = std::exchange(other.offset_, 0);
  }
  return *this;
}

void Buffer::release() {
  if (allocation_) vmaDestroyBuffer(allocator_, buffer_, allocation_);
  imported_buffer_.reset();
  imported_memory_.reset();
  if (device_bytes_) *device_bytes_ -= size_;
  device_bytes_ = nullptr;
  buffer_ = VK_NULL_HANDLE;
  allocation_ = nullptr;
  mapped_ = nullptr;
  size_ = 0;
  offset_ = 0;
}

BufferSpan Buffer::span(uint64_t offset, uint64_t size) const {
  if (offset > size_ || size > size_ - offset)
    fail("span [", offset, ", ", offset + size, ") is outside a buffer of ", size_, " bytes");
  return {buffer_, offset_ + offset, size};
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
  return chunks_[i].span(local, size);
}

std::vector<std::pair<uint64_t, BufferSpan>> SplitBuffer::pieces(uint64_t offset, uint64_t size) const {
  if (offset > size_ || size > size_ - offset)
    fail("range [", offset, ", ", offset + size, ") is outside a split buffer of ", size_, " bytes");
  std::vector<std::pair<uint64_t, BufferSpan>> out;
  while (size > 0) {
    const size_t i = chunk_of(offset);
    const uint64_t local = offset - offsets_[i];
    const uint64_t n = std::min(size, chunks_[i].size() - local);
    out.push_back({offset, chunks_[i].span(local, n)});
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

void Allocator::check_device_limit(uint64_t size, const std::string& name) const {
  if (device_limit_ > 0 && device_bytes_in_use() + size > device_limit_)
    fail("out of device memory allocating ", quoted(name), " on ", context_->info().name, ": requested ",
         format_bytes(double(size)), ", in use ", format_bytes(double(device_bytes_in_use())), " of the ",
         format_bytes(double(device_limit_)), " the device memory limit allows");
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
  if (device_use) check_device_limit(size, name);

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

// --- imported host memory ------------------------------------------------------------------------------------------

Buffer Allocator::import_host_memory(const void* data, uint64_t size, const std::string& name) {
  GRETA_CHECK(context_->features().external_memory_host, "import_host_memory without VK_EXT_external_memory_host");
  if (size == 0) fail("cannot import ", quoted(name), " of 0 bytes");
  const DeviceInfo& info = context_->info();
  const VolkDeviceTable& fn = context_->fn();
  const VkDevice device = context_->device();
  constexpr auto kHandle = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;

  // Whole pages: [base, base + bytes) covers [data, data + size); the buffer binds `offset` bytes in, which must be
  // a valid descriptor offset.
  const uint64_t page = std::max<uint64_t>(info.min_imported_host_pointer_alignment, 1);
  const auto address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t base = address / page * page;
  const uint64_t offset = address - base;
  const uint64_t bytes = (offset + size + page - 1) / page * page;
  // Kernels read weights in 16-byte words (matvec_block.comp's K-quant slots), which a binding at a smaller multiple
  // would misplace; a buffer of our own starts at 0.
  if (offset % std::max<uint64_t>(info.min_storage_buffer_offset_alignment, 16) != 0) return {};
  if (bytes > context_->max_allocation_size()) return {};

  // The buffer's usage must allow importing this handle type at all.
  VkBufferCreateInfo bi = buffer_info(bytes);
  auto query = vk_struct<VkPhysicalDeviceExternalBufferInfo>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO);
  query.usage = bi.usage;
  query.handleType = kHandle;
  auto external_props = vk_struct<VkExternalBufferProperties>(VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES);
  vkGetPhysicalDeviceExternalBufferProperties(context_->physical_device(), &query, &external_props);
  if (!(external_props.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT))
    return {};
  auto host_props = vk_struct<VkMemoryHostPointerPropertiesEXT>(VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT);
  if (fn.vkGetMemoryHostPointerPropertiesEXT(device, kHandle, reinterpret_cast<const void*>(base), &host_props) !=
      VK_SUCCESS)
    return {};
  check_device_limit(size, name);

  auto external = vk_struct<VkExternalMemoryBufferCreateInfo>(VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO);
  external.handleTypes = kHandle;
  bi.pNext = &external;
  VkBuffer raw_buffer = VK_NULL_HANDLE;
  GRETA_VK_CHECK(fn.vkCreateBuffer(device, &bi, nullptr, &raw_buffer));
  UniqueBuffer buffer(context_->dispatch(), raw_buffer);
  VkMemoryRequirements req{};
  fn.vkGetBufferMemoryRequirements(device, raw_buffer, &req);
  if (req.size > bytes) return {};

  // A memory type both the buffer and the pointer allow, device-local first.
  const VkPhysicalDeviceMemoryProperties* props = nullptr;
  vmaGetMemoryProperties(allocator_, &props);
  const uint32_t allowed = req.memoryTypeBits & host_props.memoryTypeBits;
  int type = -1;
  for (uint32_t t = 0; t < props->memoryTypeCount; ++t) {
    if (!(allowed & (1u << t))) continue;
    const bool local = props->memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (type < 0 || (local && !(props->memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)))
      type = int(t);
  }
  if (type < 0) return {};

  auto import = vk_struct<VkImportMemoryHostPointerInfoEXT>(VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT);
  import.handleType = kHandle;
  import.pHostPointer = reinterpret_cast<void*>(base);
  auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  alloc.pNext = &import;
  alloc.allocationSize = bytes;
  alloc.memoryTypeIndex = uint32_t(type);
  VkDeviceMemory raw_memory = VK_NULL_HANDLE;
  if (fn.vkAllocateMemory(device, &alloc, nullptr, &raw_memory) != VK_SUCCESS) return {};
  UniqueDeviceMemory memory(context_->dispatch(), raw_memory);
  GRETA_VK_CHECK(fn.vkBindBufferMemory(device, raw_buffer, raw_memory, 0));

  Buffer out;
  out.buffer_ = raw_buffer;
  out.imported_buffer_ = std::move(buffer);
  out.imported_memory_ = std::move(memory);
  out.offset_ = offset;
  out.size_ = size;
  out.use_ = MemoryUse::device_mapped;
  out.device_bytes_ = device_bytes_.get();
  *out.device_bytes_ += size;
  if (!name.empty()) context_->set_object_name(VK_OBJECT_TYPE_BUFFER, uint64_t(raw_buffer), name.c_str());
  return out;
}

SplitBuffer Allocator::import_split_buffer(const void* data, uint64_t size, uint64_t granule, const std::string& name) {
  if (size == 0) fail("cannot import split ", quoted(name), " of 0 bytes");
  // Each chunk is imported from whole pages: up to two pages more than it holds.
  const uint64_t page = std::max<uint64_t>(context_->info().min_imported_host_pointer_alignment, 1);
  const uint64_t max_chunk = max_chunk_bytes();
  if (max_chunk <= 2 * page || granule > max_chunk - 2 * page) return {};
  SplitBuffer out;
  out.size_ = size;
  out.granule_ = granule;
  uint64_t offset = 0;
  const auto sizes = plan_chunks(size, granule, max_chunk - 2 * page);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string chunk_name = sizes.size() == 1 ? name : cat(name.empty() ? "split" : name, "[", i, "]");
    Buffer chunk = import_host_memory(static_cast<const uint8_t*>(data) + offset, sizes[i], chunk_name);
    if (!chunk) return {};
    out.chunks_.push_back(std::move(chunk));
    out.offsets_.push_back(offset);
    offset += sizes[i];
  }
  return out;
}

}  // namespace greta::vk
