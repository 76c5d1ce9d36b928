#include "vk/queue.h"

#include <chrono>

#include "core/error.h"
#include "vk/check.h"

namespace greta::vk {

Queue::Queue(const DeviceDispatch& dispatch, uint32_t family, uint64_t wait_timeout_ms, uint64_t spin_us)
    : dispatch_(&dispatch), family_(family), wait_timeout_ns_(wait_timeout_ms * 1000000ull), spin_ns_(spin_us * 1000ull) {
  dispatch.fn.vkGetDeviceQueue(dispatch.device, family, 0, &queue_);
  auto type_info = vk_struct<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
  type_info.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type_info.initialValue = 0;
  auto info = vk_struct<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
  info.pNext = &type_info;
  VkSemaphore semaphore = VK_NULL_HANDLE;
  GRETA_VK_CHECK(dispatch.fn.vkCreateSemaphore(dispatch.device, &info, nullptr, &semaphore));
  timeline_ = UniqueSemaphore(dispatch, semaphore);
}

uint64_t Queue::submit(VkCommandBuffer command_buffer) {
  const uint64_t ticket = last_submitted_ + 1;
  auto timeline_info = vk_struct<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
  timeline_info.signalSemaphoreValueCount = 1;
  timeline_info.pSignalSemaphoreValues = &ticket;
  const VkSemaphore semaphore = timeline_.get();
  auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.pNext = &timeline_info;
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &command_buffer;
  submit.signalSemaphoreCount = 1;
  submit.pSignalSemaphores = &semaphore;
  GRETA_VK_CHECK(dispatch_->fn.vkQueueSubmit(queue_, 1, &submit, VK_NULL_HANDLE));
  last_submitted_ = ticket;
  return ticket;
}

void Queue::wait(uint64_t ticket) {
  GRETA_CHECK(ticket <= last_submitted_, "waiting for ticket ", ticket, " that was never submitted");
  if (ticket == 0) return;
  if (spin_ns_ > 0) {  // poll first: waking a blocked thread costs tens of microseconds
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
    while (completed_value() < ticket)
      if (std::chrono::steady_clock::now() >= until) break;
    if (completed_value() >= ticket) return;
  }
  const VkSemaphore semaphore = timeline_.get();
  auto info = vk_struct<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
  info.semaphoreCount = 1;
  info.pSemaphores = &semaphore;
  info.pValues = &ticket;
  const VkResult result = dispatch_->fn.vkWaitSemaphores(dispatch_->device, &info, wait_timeout_ns_);
  if (result == VK_TIMEOUT)
    fail("GPU work did not finish within ", wait_timeout_ns_ / 1000000000.0, " s (waiting for submission ", ticket,
         ", completed ", completed_value(), "): the device may be hung");
  GRETA_VK_CHECK(result);
}

uint64_t Queue::completed_value() {
  uint64_t value = 0;
  GRETA_VK_CHECK(dispatch_->fn.vkGetSemaphoreCounterValue(dispatch_->device, timeline_.get(), &value));
  return value;
}

bool Queue::is_done(uint64_t ticket) { return completed_value() >= ticket; }

}  // namespace greta::vk
