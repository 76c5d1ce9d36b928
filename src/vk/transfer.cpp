#include "vk/transfer.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "core/error.h"
#include "vk/check.h"
#include "vk/commands.h"
#include "vk/context.h"

namespace greta::vk {

namespace {

void check_range(uint64_t offset, uint64_t bytes, uint64_t size, const char* what) {
  if (offset > size || bytes > size - offset)
    fail(what, ": range [", offset, ", ", offset + bytes, ") is outside a buffer of ", size, " bytes");
}

}  // namespace

Transfer::Transfer(Context& context, Allocator& allocator, TransferOptions options)
    : context_(&context), allocator_(&allocator), options_(options) {
  if (options_.chunk_bytes < 4) fail("transfer chunk size must be at least 4 bytes");
  if (options_.slots == 0) fail("transfer ring needs at least one slot");
  const DeviceDispatch& d = context.dispatch();
  auto pool_info = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pool_info.queueFamilyIndex = context.queue().family();
  VkCommandPool pool = VK_NULL_HANDLE;
  GRETA_VK_CHECK(d.fn.vkCreateCommandPool(d.device, &pool_info, nullptr, &pool));
  pool_ = UniqueCommandPool(d, pool);
  slots_.resize(options_.slots);
}

Transfer::~Transfer() {
  try {
    uint64_t last = 0;
    for (const Slot& s : slots_) last = std::max(last, s.ticket);
    context_->queue().wait(last);
  } catch (...) {
    // A lost device; the Context's teardown waits for the device anyway.
  }
}

Transfer::Slot& Transfer::acquire_slot() {
  Slot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % slots_.size();
  const DeviceDispatch& d = context_->dispatch();
  if (!slot.staging) {
    // Staging is read and written by the host: HOST_ACCESS_RANDOM picks cached memory where there is some, which
    // serves downloads well and uploads no worse.
    slot.staging = allocator_->create_buffer(options_.chunk_bytes, MemoryUse::readback, "transfer staging");
    auto alloc = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    alloc.commandPool = pool_.get();
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    GRETA_VK_CHECK(d.fn.vkAllocateCommandBuffers(d.device, &alloc, &slot.command_buffer));
  } else {
    context_->queue().wait(slot.ticket);
    GRETA_VK_CHECK(d.fn.vkResetCommandBuffer(slot.command_buffer, 0));
  }
  return slot;
}

void Transfer::begin(Slot& slot) {
  const auto& fn = context_->fn();
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  GRETA_VK_CHECK(fn.vkBeginCommandBuffer(slot.command_buffer, &begin));
  record_full_barrier(fn, slot.command_buffer);  // after every earlier submission (write-after-read included)
}

uint64_t Transfer::upload_pieces(const std::vector<Piece>& pieces, const uint8_t* src) {
  const auto& fn = context_->fn();
  uint64_t ticket = 0;
  Slot* slot = nullptr;
  uint64_t used = 0;  // bytes of the current slot already filled
  std::vector<VkBufferCopy> regions;
  VkBuffer region_target = VK_NULL_HANDLE;
  // Flush the pending regions of the current slot into its command buffer.
  auto flush_regions = [&] {
    if (!regions.empty())
      fn.vkCmdCopyBuffer(slot->command_buffer, slot->staging.handle(), region_target, uint32_t(regions.size()),
                         regions.data());
    regions.clear();
  };
  auto submit = [&] {
    flush_regions();
    slot->staging.flush(0, used);
    GRETA_VK_CHECK(fn.vkEndCommandBuffer(slot->command_buffer));
    ticket = slot->ticket = context_->queue().submit(slot->command_buffer);
    ++submissions_;
    slot = nullptr;
  };
  for (const Piece& piece : pieces) {
    uint64_t done = 0;
    while (done < piece.span.size) {
      if (!slot) {
        slot = &acquire_slot();
        begin(*slot);
        used = 0;
      }
      const uint64_t n = std::min(piece.span.size - done, options_.chunk_bytes - used);
      std::memcpy(static_cast<uint8_t*>(slot->staging.mapped()) + used, src + piece.host_offset + done, size_t(n));
      if (region_target != piece.span.buffer) flush_regions();
      region_target = piece.span.buffer;
      regions.push_back({used, piece.span.offset + done, n});
      used += n;
      done += n;
      if (used == options_.chunk_bytes) submit();
    }
  }
  if (slot) submit();
  return ticket;
}

void Transfer::download_pieces(const std::vector<Piece>& pieces, uint8_t* dst) {
  const auto& fn = context_->fn();
  // One in-flight chunk per slot; the oldest is copied out before its slot is reused.
  struct CopyOut {
    uint64_t staging_offset, host_offset, bytes;
  };
  struct Pending {
    Slot* slot = nullptr;
    std::vector<CopyOut> outs;
    uint64_t used = 0;
  };
  std::deque<Pending> pending;
  auto complete_oldest = [&] {
    Pending p = std::move(pending.front());
    pending.pop_front();
    context_->queue().wait(p.slot->ticket);
    p.slot->staging.invalidate(0, p.used);
    const uint8_t* staged = static_cast<const uint8_t*>(p.slot->staging.mapped());
    for (const CopyOut& o : p.outs) std::memcpy(dst + o.host_offset, staged + o.staging_offset, size_t(o.bytes));
  };
  Pending current{};
  bool open = false;
  auto submit = [&] {
    auto to_host = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    to_host.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    fn.vkCmdPipelineBarrier(current.slot->command_buffer, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                            0, 1, &to_host, 0, nullptr, 0, nullptr);
    GRETA_VK_CHECK(fn.vkEndCommandBuffer(current.slot->command_buffer));
    current.slot->ticket = context_->queue().submit(current.slot->command_buffer);
    ++submissions_;
    pending.push_back(std::move(current));
    current = Pending{};
    open = false;
  };
  for (const Piece& piece : pieces) {
    uint64_t done = 0;
    while (done < piece.span.size) {
      if (!open) {
        if (pending.size() == slots_.size()) complete_oldest();  // its slot is the next one in the ring
        current.slot = &acquire_slot();
        begin(*current.slot);
        current.used = 0;
        open = true;
      }
      const uint64_t n = std::min(piece.span.size - done, options_.chunk_bytes - current.used);
      const VkBufferCopy region{piece.span.offset + done, current.used, n};
      fn.vkCmdCopyBuffer(current.slot->command_buffer, piece.span.buffer, current.slot->staging.handle(), 1, &region);
      current.outs.push_back({current.used, piece.host_offset + done, n});
      current.used += n;
      done += n;
      if (current.used == options_.chunk_bytes) submit();
    }
  }
  if (open) submit();
  while (!pending.empty()) complete_oldest();
}

uint64_t Transfer::upload(BufferSpan dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > dst.size) fail("upload of ", bytes, " bytes into a span of ", dst.size);
  dst.size = bytes;
  return upload_pieces({Piece{dst, 0}}, static_cast<const uint8_t*>(src));
}

uint64_t Transfer::upload(const Buffer& dst, uint64_t dst_offset, const void* src, uint64_t bytes) {
  check_range(dst_offset, bytes, dst.size(), "upload");
  if (bytes == 0) return 0;
  return upload_pieces({Piece{dst.span(dst_offset, bytes), 0}}, static_cast<const uint8_t*>(src));
}

uint64_t Transfer::upload(const SplitBuffer& dst, uint64_t dst_offset, const void* src, uint64_t bytes) {
  check_range(dst_offset, bytes, dst.size(), "upload");
  if (bytes == 0) return 0;
  std::vector<Piece> pieces;
  for (const auto& [offset, span] : dst.pieces(dst_offset, bytes)) pieces.push_back({span, offset - dst_offset});
  return upload_pieces(pieces, static_cast<const uint8_t*>(src));
}

void Transfer::download(BufferSpan src, void* dst, uint64_t bytes) {
  if (bytes == 0) return;
  if (bytes > src.size) fail("download of ", bytes, " bytes from a span of ", src.size);
  src.size = bytes;
  download_pieces({Piece{src, 0}}, static_cast<uint8_t*>(dst));
}

void Transfer::download(const Buffer& src, uint64_t src_offset, void* dst, uint64_t bytes) {
  check_range(src_offset, bytes, src.size(), "download");
  if (bytes == 0) return;
  download_pieces({Piece{src.span(src_offset, bytes), 0}}, static_cast<uint8_t*>(dst));
}

void Transfer::download(const SplitBuffer& src, uint64_t src_offset, void* dst, uint64_t bytes) {
  check_range(src_offset, bytes, src.size(), "download");
  if (bytes == 0) return;
  std::vector<Piece> pieces;
  for (const auto& [offset, span] : src.pieces(src_offset, bytes)) pieces.push_back({span, offset - src_offset});
  download_pieces(pieces, static_cast<uint8_t*>(dst));
}

}  // namespace greta::vk
