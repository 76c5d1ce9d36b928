// Context: one Vulkan instance + one logical device + its compute queue. Deliberately small: memory (memory.h),
// transfers (transfer.h), command recording (commands.h) and pipelines (pipelines.h) are separate objects that take a
// Context&, and must be destroyed before it.
//
//   auto ctx = greta::vk::Context::create();          // default device: discrete > integrated > virtual > cpu
//   auto ctx = greta::vk::Context::create(1, opts);   // `--device 1`
//
// Not thread-safe: one thread uses a Context (and everything made from it) at a time.
#pragma once
#include <volk.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "vk/device_info.h"
#include "vk/handles.h"
#include "vk/instance.h"
#include "vk/queue.h"

namespace greta::vk {

struct ContextOptions {
  InstanceOptions instance;  // validation (also GRETA_VK_VALIDATION=1), loader path

  // Pipeline cache directory. Empty: $GRETA_CACHE_DIR, else $XDG_CACHE_HOME/greta, else ~/.cache/greta.
  std::string cache_dir;
  bool persist_pipeline_cache = true;

  // Use VK_KHR_push_descriptor when the device has it; false forces the descriptor-pool path (tests cover both).
  bool push_descriptors = true;
  // Enable VK_KHR_cooperative_matrix when the device has it.
  bool cooperative_matrix = true;

  // Test hooks: pretend the device's binding range / allocation size limits are smaller (0 = the device's own), so
  // the splitting logic can be exercised with small buffers.
  uint64_t max_binding_range = 0;
  uint64_t max_allocation_size = 0;

  // Longest a wait for GPU work may take before it is reported as a hung device.
  uint64_t wait_timeout_ms = 120000;

  // Waits for GPU work first poll the timeline semaphore for up to this long before blocking in the driver: a
  // blocked thread wakes late, which every step pays (on the H200, 125-235 us of a batched step's 6.5-12.7 ms, 2 %).
  // Unset: 100 ms on a discrete GPU (a core polls while a step runs, as CUDA's default synchronization does), 5 ms
  // on an integrated one (its CPU cores share the power budget with the GPU), never on CPU devices (lavapipe), whose
  // workers need the cores; set: this long on any device (the Vulkan backend's experiment switch GRETA_VK_SPIN_US
  // sets it for measurements).
  std::optional<uint64_t> spin_wait_us;

  // Receives warnings (e.g. a pipeline cache that could not be written). Default: "greta: warning: ..." on stderr.
  std::function<void(const std::string&)> on_warning;
};

// What was enabled on the logical device: a feature is enabled when the device has it and GRETA's shaders use it.
struct EnabledFeatures {
  bool shader_float16 = false;
  bool shader_int8 = false;
  bool shader_int16 = false;
  bool storage_buffer_16bit = false;
  bool storage_buffer_8bit = false;
  bool subgroup_extended_types = false;
  bool subgroup_size_control = false;
  bool compute_full_subgroups = false;
  bool vulkan_memory_model = false;
  bool cooperative_matrix = false;
  bool integer_dot_product = false;  // shaderIntegerDotProduct (the int8 decode matvecs)
  bool push_descriptors = false;
  bool memory_budget = false;
  bool external_memory_host = false;  // Allocator::import_host_memory
  bool pipeline_statistics = false;  // GRETA_VK_PIPELINE_STATS=1: print each pipeline's compiler statistics
};

class Context {
public:
  // device_index < 0 picks the default device. Throws greta::Error for: no loader, no device, an index out of range,
  // a device GRETA cannot use (Vulkan < 1.2, no compute queue, no timeline semaphores), missing validation layer.
  static std::unique_ptr<Context> create(int device_index = -1, const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  const EnabledFeatures& features() const { return features_; }
  const ContextOptions& options() const { return options_; }

  const Instance& instance() const { return *instance_; }
  VkPhysicalDevice physical_device() const { return physical_device_; }
  VkDevice device() const { return dispatch_.device; }
  const VolkDeviceTable& fn() const { return dispatch_.fn; }
  const DeviceDispatch& dispatch() const { return dispatch_; }
  Queue& queue() { return *queue_; }

  // The limits buffers are planned against (the device's, or the smaller test overrides).
  uint64_t max_binding_range() const;
  uint64_t max_allocation_size() const;

  const std::shared_ptr<ValidationLog>& validation_log() const { return instance_->validation_log(); }
  void warn(const std::string& message) const;
  void set_object_name(VkObjectType type, uint64_t handle, const char* name) const {
    instance_->set_object_name(dispatch_.device, type, handle, name);
  }

private:
  Context(std::unique_ptr<Instance> instance, VkPhysicalDevice physical_device, DeviceInfo info,
          const ContextOptions& options);

  ContextOptions options_;
  std::unique_ptr<Instance> instance_;
  VkPhysicalDevice physical_device_ = VK_NULL_HANDLE;
  DeviceInfo info_;
  EnabledFeatures features_;
  DeviceDispatch dispatch_;  // owns the VkDevice (destroyed in ~Context); never moves
  std::unique_ptr<Queue> queue_;
};

}  // namespace greta::vk
