// Device memory through VMA: buffers, bindable spans, and split buffers for tensors larger than one binding.
//
// Two device limits shape every large tensor:
//   maxStorageBufferRange      the most bytes one storage-buffer binding may cover (128 MiB on lavapipe, 4 GiB - 1
//                              on most GPUs);
//   maxMemoryAllocationSize    the most bytes one allocation (and hence one VkBuffer) may hold (often 2-4 GiB).
// A SplitBuffer holds a logical byte range as several VkBuffers ("chunks"), each small enough to be allocated and
// bound whole, and cut at multiples of a caller-given granule (a weight row, a quant block row) so a row never
// straddles two chunks. A kernel then binds one chunk (or a BufferSpan inside one) per dispatch: a 5 GiB weight is
// two or three bindings, never one 4 GiB binding.
#pragma once
#include <volk.h>

#include "vk/handles.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

struct VmaAllocator_T;
struct VmaAllocation_T;

namespace greta::vk {

class Context;

enum class MemoryUse {
  device,    // device-local; kernels read and write it; filled and read back through Transfer
  upload,    // host-visible, persistently mapped: staging for host -> device
  readback,  // host-visible, persistently mapped, cached when possible: staging for device -> host
  // Unified memory (DeviceInfo::unified_memory): host-visible, persistently mapped, device-local when a heap has
  // room; the host writes weights straight in (no staging). Counted as device memory.
  device_mapped,
};

// A bindable byte range of one VkBuffer (what a descriptor binding covers).
struct BufferSpan {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;
  uint64_t size = 0;
};

class Buffer {
public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  uint64_t size() const { return size_; }
  MemoryUse use() const { return use_; }
  explicit operator bool() const { return buffer_ != VK_NULL_HANDLE; }

  // What a descriptor binds. An imported buffer (Allocator::import_host_memory) starts `offset_` bytes into its
  // VkBuffer, which begins at the page below the host range.
  BufferSpan span() const { return {buffer_, offset_, size_}; }
  // Bounds-checked: throws greta::Error when [offset, offset + size) is not inside the buffer.
  BufferSpan span(uint64_t offset, uint64_t size) const;
  bool imported() const { return bool(imported_memory_); }

  // Host mapping (upload / readback / device_mapped buffers; nullptr otherwise, imported ones included). After host
  // writes call flush(), before host reads call invalidate(): both are no-ops on host-coherent memory.
  void* mapped() const { return mapped_; }
  void flush(uint64_t offset, uint64_t size) const;
  void invalidate(uint64_t offset, uint64_t size) const;

private:
  friend class Allocator;
  void release();
  VmaAllocator_T* allocator_ = nullptr;
  VmaAllocation_T* allocation_ = nullptr;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  uint64_t size_ = 0;
  MemoryUse use_ = MemoryUse::device;
  void* mapped_ = nullptr;
  uint64_t* device_bytes_ = nullptr;  // the allocator's count of device-local bytes, for device buffers
  // Imported host memory (not VMA's): the buffer and its own VkDeviceMemory (declared first: destroyed last), and
  // where the bound range starts in the buffer.
  UniqueDeviceMemory imported_memory_;
  UniqueBuffer imported_buffer_;
  uint64_t offset_ = 0;
};

// How a logical size is cut into chunks: every chunk but the last holds `chunk_bytes` (a multiple of the granule and
// of 4, at most `max_chunk_bytes`); the last holds the rest. Pure, so the arithmetic is testable on its own. Throws
// greta::Error when one granule is larger than max_chunk_bytes.
std::vector<uint64_t> plan_chunks(uint64_t total_bytes, uint64_t granule_bytes, uint64_t max_chunk_bytes);

class SplitBuffer {
public:
  SplitBuffer() = default;
  SplitBuffer(SplitBuffer&&) noexcept = default;
  SplitBuffer& operator=(SplitBuffer&&) noexcept = default;

  uint64_t size() const { return size_; }
  uint64_t granule() const { return granule_; }
  size_t chunk_count() const { return chunks_.size(); }
  const Buffer& chunk(size_t i) const { return chunks_.at(i); }
  uint64_t chunk_offset(size_t i) const { return offsets_.at(i); }  // logical offset where chunk i starts
  size_t chunk_of(uint64_t offset) const;                            // the chunk holding logical byte `offset`

  // A bindable span for a logical range that lies inside one chunk; throws greta::Error when it would straddle two.
  BufferSpan span(uint64_t offset, uint64_t size) const;
  // A logical range cut at chunk boundaries: (logical offset, span) pieces in order. Used by transfers.
  std::vector<std::pair<uint64_t, BufferSpan>> pieces(uint64_t offset, uint64_t size) const;

private:
  friend class Allocator;
  uint64_t size_ = 0;
  uint64_t granule_ = 1;
  std::vector<Buffer> chunks_;
  std::vector<uint64_t> offsets_;
};

struct HeapBudget {
  uint32_t heap = 0;
  bool device_local = false;
  uint64_t size = 0;
  uint64_t budget = 0;  // VK_EXT_memory_budget's estimate, else VMA's heuristic (80% of the heap)
  uint64_t usage = 0;   // what this process uses
};

class Allocator {
public:
  explicit Allocator(Context& context);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // One VkBuffer usable as a storage buffer and a transfer source/destination. Throws greta::Error naming the
  // sizes for: a zero size, a size over maxMemoryAllocationSize (use create_split_buffer), a size over the heap, and
  // out-of-memory (requested, heap size, budget, usage).
  Buffer create_buffer(uint64_t size, MemoryUse use, const std::string& name = "");
  // A device-local logical buffer of `size` bytes in chunks of whole granules, each chunk within both the binding
  // range and the allocation size limit.
  SplitBuffer create_split_buffer(uint64_t size, uint64_t granule, const std::string& name = "",
                                  MemoryUse use = MemoryUse::device);

  // Host memory used in place as device memory (VK_EXT_external_memory_host; Context::features().
  // external_memory_host): a device_mapped-like buffer whose span covers exactly [data, data + size). The memory
  // must stay valid, and unchanged, until the buffer is destroyed; the device only reads it. Imported from the page
  // (minImportedHostPointerAlignment) below `data` to the one above its end, so those pages must be mapped. Counted
  // as device bytes (the device memory limit applies). Returns an empty Buffer when this range cannot be used in
  // place: `data` not at a multiple of minStorageBufferOffsetAlignment and of 16 bytes within its page (kernels read
  // weights in 16-byte words: matvec_block.comp), no memory type the device imports it into, or the driver refuses
  // it. The caller then copies.
  Buffer import_host_memory(const void* data, uint64_t size, const std::string& name = "");
  // The same for a logical range in chunks of whole granules (create_split_buffer's cut); empty (size() 0) when any
  // chunk cannot be imported.
  SplitBuffer import_split_buffer(const void* data, uint64_t size, uint64_t granule, const std::string& name = "");

  // The largest chunk create_split_buffer makes: min(binding range, allocation size), before granule rounding.
  uint64_t max_chunk_bytes() const;
  // Caps the device-local bytes this allocator's buffers may hold at once (0: no cap): a device-local buffer that would
  // pass it fails as out-of-memory does, naming the limit. Tests and `--device-memory-limit` use it to act as a
  // smaller GPU.
  void set_device_limit(uint64_t bytes) { device_limit_ = bytes; }
  uint64_t device_limit() const { return device_limit_; }
  // Bytes held by this allocator's live device buffers (MemoryUse::device; staging buffers are not counted).
  uint64_t device_bytes_in_use() const { return *device_bytes_; }
  std::vector<HeapBudget> budgets() const;
  Context& context() const { return *context_; }

private:
  void check_device_limit(uint64_t size, const std::string& name) const;
  [[noreturn]] void fail_out_of_memory(uint64_t size, MemoryUse use, const std::string& name, VkResult result) const;
  uint32_t heap_for(uint64_t size, MemoryUse use) const;

  Context* context_;
  VmaAllocator_T* allocator_ = nullptr;
  uint64_t device_limit_ = 0;
  // Behind a pointer so that buffers can count themselves out when destroyed (buffers never outlive the allocator).
  std::unique_ptr<uint64_t> device_bytes_ = std::make_unique<uint64_t>(0);
};

}  // namespace greta::vk
