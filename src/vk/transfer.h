// Host <-> device copies of any size through a ring of staging chunks.
//
// The ring has `slots` host-visible staging buffers of `chunk_bytes` each (default 2 x 64 MiB, allocated lazily on
// first use). An upload copies the host data chunk by chunk into the next free slot and submits a GPU copy from it;
// a slot is reused once the copy that read it has finished (its timeline ticket), so filling one slot overlaps the
// GPU copying the previous one. A download runs the other way: the GPU copies into slot k while the host copies
// slot k-1 out. Large destinations (SplitBuffer) are cut at chunk boundaries.
//
// Ordering: uploads are visible to every later submission on the queue (each command buffer starts with a full
// barrier); upload() returns once the host data is in staging memory (the source may be reused at once) and gives
// the ticket of the last GPU copy. download() returns when the data is in host memory.
#pragma once
#include <volk.h>

#include <cstdint>
#include <vector>

#include "vk/handles.h"
#include "vk/memory.h"

namespace greta::vk {

class Context;

struct TransferOptions {
  uint64_t chunk_bytes = uint64_t(64) << 20;
  uint32_t slots = 2;
};

class Transfer {
public:
  Transfer(Context& context, Allocator& allocator, TransferOptions options = {});
  ~Transfer();  // waits for its own copies (their staging slots must stay alive until then)
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  uint64_t upload(BufferSpan dst, const void* src, uint64_t bytes);
  uint64_t upload(const Buffer& dst, uint64_t dst_offset, const void* src, uint64_t bytes);
  uint64_t upload(const SplitBuffer& dst, uint64_t dst_offset, const void* src, uint64_t bytes);

  void download(BufferSpan src, void* dst, uint64_t bytes);
  void download(const Buffer& src, uint64_t src_offset, void* dst, uint64_t bytes);
  void download(const SplitBuffer& src, uint64_t src_offset, void* dst, uint64_t bytes);

  template <class T>
  uint64_t upload(const Buffer& dst, const std::vector<T>& values) {
    return upload(dst, 0, values.data(), values.size() * sizeof(T));
  }
  template <class T>
  std::vector<T> download(const Buffer& src, size_t count) {
    std::vector<T> out(count);
    download(src, 0, out.data(), count * sizeof(T));
    return out;
  }

  uint64_t chunk_bytes() const { return options_.chunk_bytes; }
  uint64_t submissions() const { return submissions_; }  // GPU copies submitted so far (for tests and stats)

private:
  struct Slot {
    Buffer staging;
    VkCommandBuffer command_buffer = VK_NULL_HANDLE;
    uint64_t ticket = 0;  // last submission that used this slot
  };
  // A contiguous destination/source range inside one VkBuffer.
  struct Piece {
    BufferSpan span;
    uint64_t host_offset;  // into the caller's host memory
  };
  uint64_t upload_pieces(const std::vector<Piece>& pieces, const uint8_t* src);
  void download_pieces(const std::vector<Piece>& pieces, uint8_t* dst);
  Slot& acquire_slot();  // the next slot, idle and with its command buffer reset
  void begin(Slot& slot);

  Context* context_;
  Allocator* allocator_;
  TransferOptions options_;
  UniqueCommandPool pool_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  uint64_t submissions_ = 0;
};

}  // namespace greta::vk
