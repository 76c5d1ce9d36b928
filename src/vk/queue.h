// The compute queue and its timeline semaphore.
//
// Every submission to the queue signals the next value of one timeline semaphore, so a submission's completion is a
// number (a "ticket"): work with ticket t is done once the semaphore's value is >= t, and since the queue executes in
// submission order, so is every earlier ticket. Waiting is vkWaitSemaphores on that value, never vkQueueWaitIdle /
// vkDeviceWaitIdle (those are for teardown only). A Queue is used from one thread at a time.
#pragma once
#include <volk.h>

#include <cstdint>

#include "vk/handles.h"

namespace greta::vk {

class Queue {
public:
  // spin_us: how long wait() polls the semaphore before blocking (ContextOptions::spin_wait_us).
  Queue(const DeviceDispatch& dispatch, uint32_t family, uint64_t wait_timeout_ms, uint64_t spin_us = 0);
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Submits one command buffer; returns its ticket.
  uint64_t submit(VkCommandBuffer command_buffer);
  // Blocks until `ticket` is done. Throws greta::Error if the device is lost or the work takes longer than the
  // context's wait timeout (a hung GPU must not hang the program).
  void wait(uint64_t ticket);
  bool is_done(uint64_t ticket);
  uint64_t completed_value();
  uint64_t last_submitted() const { return last_submitted_; }
  void wait_all() { wait(last_submitted_); }

  VkQueue handle() const { return queue_; }
  uint32_t family() const { return family_; }
  VkSemaphore timeline() const { return timeline_.get(); }

private:
  const DeviceDispatch* dispatch_;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  uint64_t wait_timeout_ns_ = 0;
  uint64_t spin_ns_ = 0;
  UniqueSemaphore timeline_;
  uint64_t last_submitted_ = 0;
};

}  // namespace greta::vk
