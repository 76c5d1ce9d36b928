// Move-only RAII owners for Vulkan objects that belong to a VkDevice.
//
// Device-level functions are called through a per-device function table (volk's VolkDeviceTable), not through
// volk's process-wide pointers, so several devices can live side by side. DeviceDispatch pairs the device with its
// table; the Context owns it and never moves it, so every owner below keeps just a pointer to it plus its handle.
// An owner must be destroyed before the Context that made it (the validation layer reports any that outlive it).
#pragma once
#include <volk.h>

#include <utility>

namespace greta::vk {

// A zero-initialised Vulkan struct with its sType set: auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_...).
template <class T>
T vk_struct(VkStructureType type) {
  T value{};
  value.sType = type;
  return value;
}

// Appends structs to a pNext chain: PNextChain chain{&features2.pNext}; chain.add(storage16); chain.add(...);
struct PNextChain {
  void** tail;
  template <class T>
  void add(T& s) {
    *tail = &s;
    tail = &s.pNext;
  }
};

struct DeviceDispatch {
  VkDevice device = VK_NULL_HANDLE;
  VolkDeviceTable fn{};
};

template <class Handle, class Traits>
class DeviceObject {
public:
  DeviceObject() = default;
  DeviceObject(const DeviceDispatch& dispatch, Handle handle) : dispatch_(&dispatch), handle_(handle) {}
  ~DeviceObject() { reset(); }
  DeviceObject(DeviceObject&& other) noexcept
      : dispatch_(other.dispatch_), handle_(std::exchange(other.handle_, Handle(VK_NULL_HANDLE))) {}
  DeviceObject& operator=(DeviceObject&& other) noexcept {
    if (this != &other) {
      reset();
      dispatch_ = other.dispatch_;
      handle_ = std::exchange(other.handle_, Handle(VK_NULL_HANDLE));
    }
    return *this;
  }
  DeviceObject(const DeviceObject&) = delete;
  DeviceObject& operator=(const DeviceObject&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != VK_NULL_HANDLE; }
  void reset() {
    if (handle_ != VK_NULL_HANDLE) Traits::destroy(*dispatch_, handle_);
    handle_ = VK_NULL_HANDLE;
  }

private:
  const DeviceDispatch* dispatch_ = nullptr;
  Handle handle_ = VK_NULL_HANDLE;
};

#define GRETA_VK_DEVICE_OBJECT(Name, Handle, destroy_fn)                      \
  struct Name##Traits {                                                       \
    static void destroy(const DeviceDispatch& d, Handle h) { d.fn.destroy_fn(d.device, h, nullptr); } \
  };                                                                          \
  using Name = DeviceObject<Handle, Name##Traits>

GRETA_VK_DEVICE_OBJECT(UniqueSemaphore, VkSemaphore, vkDestroySemaphore);
GRETA_VK_DEVICE_OBJECT(UniqueCommandPool, VkCommandPool, vkDestroyCommandPool);
GRETA_VK_DEVICE_OBJECT(UniqueQueryPool, VkQueryPool, vkDestroyQueryPool);
GRETA_VK_DEVICE_OBJECT(UniqueDescriptorPool, VkDescriptorPool, vkDestroyDescriptorPool);
GRETA_VK_DEVICE_OBJECT(UniqueDescriptorSetLayout, VkDescriptorSetLayout, vkDestroyDescriptorSetLayout);
GRETA_VK_DEVICE_OBJECT(UniquePipelineLayout, VkPipelineLayout, vkDestroyPipelineLayout);
GRETA_VK_DEVICE_OBJECT(UniquePipeline, VkPipeline, vkDestroyPipeline);
GRETA_VK_DEVICE_OBJECT(UniquePipelineCache, VkPipelineCache, vkDestroyPipelineCache);
GRETA_VK_DEVICE_OBJECT(UniqueShaderModule, VkShaderModule, vkDestroyShaderModule);
// Buffers and memory outside VMA: imported host memory (memory.h, Allocator::import_host_memory).
GRETA_VK_DEVICE_OBJECT(UniqueBuffer, VkBuffer, vkDestroyBuffer);
GRETA_VK_DEVICE_OBJECT(UniqueDeviceMemory, VkDeviceMemory, vkFreeMemory);

#undef GRETA_VK_DEVICE_OBJECT

}  // namespace greta::vk
