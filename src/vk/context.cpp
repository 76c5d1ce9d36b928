#include "vk/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "vk/check.h"

namespace greta::vk {

namespace {


std::string describe_devices(const std::vector<DeviceInfo>& infos) {
  std::string s;
  for (const auto& d : infos) s += cat(s.empty() ? "" : ", ", d.index, ": ", d.name);
  return s;
}

}  // namespace

std::unique_ptr<Context> Context::create(int device_index, const ContextOptions& options) {
  auto instance = std::make_unique<Instance>(options.instance);
  const auto devices = instance->physical_devices();
  std::vector<DeviceInfo> infos;
  for (uint32_t i = 0; i < devices.size(); ++i) infos.push_back(query_device_info(*instance, devices[i], i));

  int index = device_index;
  if (index < 0) {
    index = pick_default_device(infos);
    if (index < 0) {
      std::string reasons;
      for (const auto& d : infos) reasons += cat(reasons.empty() ? "" : "; ", d.index, ": ", d.name, ": ", d.unusable_reason);
      fail("no usable Vulkan device (", reasons, ")");
    }
  } else if (size_t(index) >= infos.size()) {
    fail("Vulkan device index ", index, " is out of range: ", infos.size(), " device(s) found (",
         describe_devices(infos), ")");
  }
  const DeviceInfo& chosen = infos[index];
  if (!chosen.usable) fail("Vulkan device ", index, " (", chosen.name, ") cannot be used: ", chosen.unusable_reason);
  return std::unique_ptr<Context>(new Context(std::move(instance), devices[index], chosen, options));
}

Context::Context(std::unique_ptr<Instance> instance, VkPhysicalDevice physical_device, DeviceInfo info,
                 const ContextOptions& options)
    : options_(options), instance_(std::move(instance)), physical_device_(physical_device), info_(std::move(info)) {
  const bool v13 = std::min(info_.api_version, instance_->api_version()) >= VK_API_VERSION_1_3;

  // --- extensions: the ones GRETA uses, when present ------------------------------------------------------------
  std::vector<const char*> extensions;
  if (info_.has_push_descriptor && options_.push_descriptors) {
    extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    features_.push_descriptors = true;
  }
  if (info_.has_memory_budget) {
    extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    features_.memory_budget = true;
  }
  if (info_.subgroup_size_control && !v13) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  const bool coopmat = info_.has_cooperative_matrix && options_.cooperative_matrix;
  if (coopmat) extensions.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
  // Integer dot products (SPV_KHR_integer_dot_product): core in 1.3, an extension before.
  const bool int_dot = info_.integer_dot_product && (v13 || info_.has_integer_dot_product_ext);
  if (int_dot && !v13) extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  if (info_.has_portability_subset) extensions.push_back("VK_KHR_portability_subset");  // required when present
  // Only where the imported memory is the device's own (unified memory): on a discrete GPU it would be read over
  // the bus on every use.
  if (info_.imports_host_memory()) {
    extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    features_.external_memory_host = true;
  }
  // GRETA_VK_PIPELINE_STATS=1: the driver's statistics per pipeline (registers, spills, shared memory: whatever it
  // reports) on stderr as pipelines are created, for tuning kernels. Off by default: capturing them may slow
  // compilation.
  const char* stats_env = std::getenv("GRETA_VK_PIPELINE_STATS");
  const bool stats = stats_env && std::string_view(stats_env) == "1" && info_.has_pipeline_executable_properties;
  if (stats) extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);

  // --- features: exactly those the device has and GRETA's shaders use -------------------------------------------
  // Individual feature structs (not VkPhysicalDeviceVulkan1xFeatures) so the same code serves 1.2 and 1.3 devices.
  auto features2 = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  features2.features.shaderInt16 = info_.shader_int16;  // 16-bit integer math (packed quant unpacking)
  auto storage16 = vk_struct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  // f16 / u16 loads and stores in storage buffers (f16 weights, quant scales). glslang may express SSBO access as
  // either capability, so the uniform-and-storage variant is enabled along when present.
  storage16.storageBuffer16BitAccess = info_.storage_buffer_16bit;
  auto f16i8 = vk_struct<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
  f16i8.shaderFloat16 = info_.shader_float16;  // f16 arithmetic
  f16i8.shaderInt8 = info_.shader_int8;        // int8 arithmetic (q8 activations)
  auto storage8 = vk_struct<VkPhysicalDevice8BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES);
  storage8.storageBuffer8BitAccess = info_.storage_buffer_8bit;  // byte loads of quantized blocks
  auto timeline = vk_struct<VkPhysicalDeviceTimelineSemaphoreFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES);
  timeline.timelineSemaphore = VK_TRUE;  // required (checked by DeviceInfo::usable)
  auto vmm = vk_struct<VkPhysicalDeviceVulkanMemoryModelFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
  vmm.vulkanMemoryModel = info_.vulkan_memory_model;  // cooperative-matrix shaders declare VulkanMemoryModel
  vmm.vulkanMemoryModelDeviceScope = info_.vulkan_memory_model_device_scope;
  auto ext_types = vk_struct<VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES);
  ext_types.shaderSubgroupExtendedTypes = info_.subgroup_extended_types;  // subgroup reductions on f16
  auto size_control = vk_struct<VkPhysicalDeviceSubgroupSizeControlFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES);
  size_control.subgroupSizeControl = info_.subgroup_size_control;  // pin a kernel's subgroup size (AMD 32 vs 64)
  size_control.computeFullSubgroups = info_.compute_full_subgroups;
  auto coopmat_features = vk_struct<VkPhysicalDeviceCooperativeMatrixFeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR);
  coopmat_features.cooperativeMatrix = VK_TRUE;
  auto int_dot_features = vk_struct<VkPhysicalDeviceShaderIntegerDotProductFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES);
  int_dot_features.shaderIntegerDotProduct = VK_TRUE;  // int8 activations x packed codes in the decode matvecs
  auto stats_features = vk_struct<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR);
  stats_features.pipelineExecutableInfo = VK_TRUE;

  // The same promotion rules as the query (device_info.cpp): version 1.2 is guaranteed for a usable device.
  auto supported = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  auto storage16_supported = vk_struct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  auto storage8_supported = vk_struct<VkPhysicalDevice8BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES);
  supported.pNext = &storage16_supported;
  storage16_supported.pNext = &storage8_supported;
  vkGetPhysicalDeviceFeatures2(physical_device_, &supported);
  storage16.uniformAndStorageBuffer16BitAccess = storage16.storageBuffer16BitAccess &&
                                                 storage16_supported.uniformAndStorageBuffer16BitAccess;
  storage8.uniformAndStorageBuffer8BitAccess = storage8.storageBuffer8BitAccess &&
                                               storage8_supported.uniformAndStorageBuffer8BitAccess;

  PNextChain chain{&features2.pNext};
  chain.add(storage16);
  chain.add(f16i8);
  chain.add(storage8);
  chain.add(timeline);
  chain.add(vmm);
  chain.add(ext_types);
  if (info_.subgroup_size_control) chain.add(size_control);
  if (coopmat) chain.add(coopmat_features);
  if (int_dot) chain.add(int_dot_features);
  if (stats) chain.add(stats_features);
  features_.pipeline_statistics = stats;

  features_.shader_float16 = info_.shader_float16;
  features_.shader_int8 = info_.shader_int8;
  features_.shader_int16 = info_.shader_int16;
  features_.storage_buffer_16bit = info_.storage_buffer_16bit;
  features_.storage_buffer_8bit = info_.storage_buffer_8bit;
  features_.subgroup_extended_types = info_.subgroup_extended_types;
  features_.subgroup_size_control = info_.subgroup_size_control;
  features_.compute_full_subgroups = info_.subgroup_size_control && info_.compute_full_subgroups;
  features_.vulkan_memory_model = info_.vulkan_memory_model;
  features_.cooperative_matrix = coopmat;
  features_.integer_dot_product = int_dot;

  const float priority = 1.0f;
  auto queue_info = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  queue_info.queueFamilyIndex = uint32_t(info_.compute_queue_family);
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;

  auto device_info = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  device_info.pNext = &features2;
  device_info.queueCreateInfoCount = 1;
  device_info.pQueueCreateInfos = &queue_info;
  device_info.enabledExtensionCount = uint32_t(extensions.size());
  device_info.ppEnabledExtensionNames = extensions.data();
  GRETA_VK_CHECK(vkCreateDevice(physical_device_, &device_info, nullptr, &dispatch_.device));
  volkLoadDeviceTable(&dispatch_.fn, dispatch_.device);
  try {
    const uint64_t rule_us = info_.type == VK_PHYSICAL_DEVICE_TYPE_CPU              ? 0
                             : info_.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? 5000
                                                                                    : 100000;
    const uint64_t spin_us = options_.spin_wait_us.value_or(rule_us);
    queue_ = std::make_unique<Queue>(dispatch_, uint32_t(info_.compute_queue_family), options_.wait_timeout_ms,
                                     spin_us);
  } catch (...) {
    dispatch_.fn.vkDestroyDevice(dispatch_.device, nullptr);
    throw;
  }
  set_object_name(VK_OBJECT_TYPE_SEMAPHORE, uint64_t(queue_->timeline()), "greta queue timeline");
}

Context::~Context() {
  // Teardown is the one place a whole-device wait is right: nothing may still run when the device goes.
  dispatch_.fn.vkDeviceWaitIdle(dispatch_.device);
  queue_.reset();
  dispatch_.fn.vkDestroyDevice(dispatch_.device, nullptr);
}

uint64_t Context::max_binding_range() const {
  const uint64_t device = info_.max_storage_buffer_range;
  return options_.max_binding_range ? std::min(device, options_.max_binding_range) : device;
}

uint64_t Context::max_allocation_size() const {
  uint64_t device = info_.max_memory_allocation_size;
  if (info_.max_buffer_size) device = std::min(device, info_.max_buffer_size);
  return options_.max_allocation_size ? std::min(device, options_.max_allocation_size) : device;
}

void Context::warn(const std::string& message) const {
  if (options_.on_warning)
    options_.on_warning(message);
  else
    std::fprintf(stderr, "greta: warning: %s\n", message.c_str());
}

}  // namespace greta::vk
