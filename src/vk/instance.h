// The Vulkan instance: loader (through volk), optional validation layer with a message recorder, device listing.
//
// volk opens the loader at run time (we never link libvulkan), so a machine without Vulkan fails here with a clear
// greta::Error instead of failing to start. volk keeps the loader's global entry points process-wide; they are
// trampolines that dispatch on the handle passed, so several instances may coexist. Device-level functions are
// loaded per device (handles.h: DeviceDispatch).
#pragma once
#include <volk.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vk/device_info.h"

namespace greta::vk {

struct InstanceOptions {
  // Enable VK_LAYER_KHRONOS_validation and record its messages. Also enabled by the environment variable
  // GRETA_VK_VALIDATION=1. A missing layer is then an error, never silently ignored.
  bool validation = false;
  // The Vulkan loader library to open; empty: "libvulkan.so.1" (volk's default search). Mainly for tests and odd
  // installations. A library opened from here stays loaded for the process (volk's entry points point into it).
  std::string loader_path;
  // Print each recorded validation message to stderr as it arrives (they are recorded either way).
  bool echo_validation_messages = true;
};

// True when GRETA_VK_VALIDATION is set to something other than "" or "0".
bool validation_requested_by_env();

// Collects every warning and error the validation layer reports (the debug-utils callback may run on driver
// threads, hence the mutex). Tests assert it is empty at the end of each test case.
class ValidationLog {
public:
  void record(std::string message);
  std::vector<std::string> messages() const;
  size_t count() const;
  void clear();
  bool echo = true;

private:
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

class Instance {
public:
  // Throws greta::Error: "no Vulkan loader (libvulkan.so.1) found", "no Vulkan device found" (the loader has no
  // driver), "validation requested ... but VK_LAYER_KHRONOS_validation is not installed", or a checked call.
  explicit Instance(const InstanceOptions& options = {});
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  uint32_t api_version() const { return api_version_; }  // what the instance was created with
  bool validation_enabled() const { return messenger_ != VK_NULL_HANDLE; }
  bool debug_utils_enabled() const { return debug_utils_; }
  // Shared so that a test can still read it after the instance (and its device) are gone: messages emitted during
  // teardown (leaked objects) count too.
  const std::shared_ptr<ValidationLog>& validation_log() const { return log_; }

  // Every physical device, in the loader's order. Throws "no Vulkan device found" when there are none.
  std::vector<VkPhysicalDevice> physical_devices() const;

  // Gives an object a debug name (shows up in validation messages); no-op without debug utils.
  void set_object_name(VkDevice device, VkObjectType type, uint64_t handle, const char* name) const;

private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  uint32_t api_version_ = 0;
  bool debug_utils_ = false;
  std::shared_ptr<ValidationLog> log_ = std::make_shared<ValidationLog>();
};

// Every Vulkan device with its facts, without creating a logical device.
std::vector<DeviceInfo> list_devices(const InstanceOptions& options = {});

}  // namespace greta::vk
