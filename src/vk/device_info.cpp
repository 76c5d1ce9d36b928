#include "vk/device_info.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "vk/check.h"
#include "vk/handles.h"
#include "vk/instance.h"

namespace greta::vk {

namespace {

// Extension-provided structs may be chained only when the device advertises the extension or the Vulkan version
// that promoted it (chaining an unknown struct is invalid usage). This helper appends to a pNext chain.

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice device) {
  uint32_t count = 0;
  GRETA_VK_CHECK(vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr));
  std::vector<VkExtensionProperties> exts(count);
  GRETA_VK_CHECK(vkEnumerateDeviceExtensionProperties(device, nullptr, &count, exts.data()));
  exts.resize(count);
  return exts;
}

bool has(const std::vector<VkExtensionProperties>& exts, const char* name) {
  return std::any_of(exts.begin(), exts.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// The compute family GRETA submits to: a family with compute and timestamps, preferring one without graphics
// (dedicated compute queues don't share time slices with a display), then any compute family.
void pick_compute_queue(VkPhysicalDevice device, DeviceInfo& info) {
  uint32_t count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &count, nullptr);
  std::vector<VkQueueFamilyProperties> families(count);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &count, families.data());
  int best = -1;
  int best_score = -1;
  for (uint32_t i = 0; i < count; ++i) {
    const auto& f = families[i];
    if (!(f.queueFlags & VK_QUEUE_COMPUTE_BIT) || f.queueCount == 0) continue;
    const int score = (f.timestampValidBits > 0 ? 2 : 0) + ((f.queueFlags & VK_QUEUE_GRAPHICS_BIT) ? 0 : 1);
    if (score > best_score) {
      best = int(i);
      best_score = score;
    }
  }
  info.compute_queue_family = best;
  if (best >= 0) {
    info.compute_queue_is_dedicated = !(families[best].queueFlags & VK_QUEUE_GRAPHICS_BIT);
    info.timestamp_valid_bits = families[best].timestampValidBits;
  }
}

void query_coopmat_shapes(VkPhysicalDevice device, DeviceInfo& info) {
  if (!vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR) return;  // loader too old to know the entry point
  uint32_t count = 0;
  GRETA_VK_CHECK(vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR(device, &count, nullptr));
  std::vector<VkCooperativeMatrixPropertiesKHR> props(count, vk_struct<VkCooperativeMatrixPropertiesKHR>(VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR));
  GRETA_VK_CHECK(vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR(device, &count, props.data()));
  props.resize(count);
  for (const auto& p : props) {
    CoopMatShape s;
    s.m = p.MSize;
    s.n = p.NSize;
    s.k = p.KSize;
    s.a_type = p.AType;
    s.b_type = p.BType;
    s.c_type = p.CType;
    s.result_type = p.ResultType;
    s.saturating_accumulation = p.saturatingAccumulation;
    s.scope = p.scope;
    info.coopmat_shapes.push_back(s);
  }
}

}  // namespace

std::string component_type_name(VkComponentTypeKHR type) {
  switch (int(type)) {
    case VK_COMPONENT_TYPE_FLOAT16_KHR: return "f16";
    case VK_COMPONENT_TYPE_FLOAT32_KHR: return "f32";
    case VK_COMPONENT_TYPE_FLOAT64_KHR: return "f64";
    case VK_COMPONENT_TYPE_SINT8_KHR: return "s8";
    case VK_COMPONENT_TYPE_SINT16_KHR: return "s16";
    case VK_COMPONENT_TYPE_SINT32_KHR: return "s32";
    case VK_COMPONENT_TYPE_SINT64_KHR: return "s64";
    case VK_COMPONENT_TYPE_UINT8_KHR: return "u8";
    case VK_COMPONENT_TYPE_UINT16_KHR: return "u16";
    case VK_COMPONENT_TYPE_UINT32_KHR: return "u32";
    case VK_COMPONENT_TYPE_UINT64_KHR: return "u64";
    case VK_COMPONENT_TYPE_SINT8_PACKED_NV: return "s8x4";
    case VK_COMPONENT_TYPE_UINT8_PACKED_NV: return "u8x4";
    case VK_COMPONENT_TYPE_FLOAT_E4M3_NV: return "e4m3";
    case VK_COMPONENT_TYPE_FLOAT_E5M2_NV: return "e5m2";
    case 1000141000: return "bf16";  // VK_COMPONENT_TYPE_BFLOAT16_KHR (headers newer than ours)
    default: return cat("type", int(type));
  }
}

std::string version_string(uint32_t v) {
  return cat(VK_API_VERSION_MAJOR(v), ".", VK_API_VERSION_MINOR(v), ".", VK_API_VERSION_PATCH(v));
}

std::string CoopMatShape::to_string() const {
  std::string s = cat(m, "x", n, "x", k, " ", component_type_name(a_type), "*", component_type_name(b_type), "->",
                      component_type_name(result_type));
  if (c_type != result_type) s += cat(" (C ", component_type_name(c_type), ")");
  if (saturating_accumulation) s += " sat";
  if (scope != VK_SCOPE_SUBGROUP_KHR) s += scope == VK_SCOPE_WORKGROUP_KHR ? " workgroup" : cat(" scope", int(scope));
  return s;
}

std::string DeviceInfo::type_name() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

std::string DeviceInfo::api_version_string() const { return version_string(api_version); }

bool DeviceInfo::supports_coopmat(uint32_t m_, uint32_t n_, uint32_t k_, VkComponentTypeKHR ab,
                                  VkComponentTypeKHR acc) const {
  if (!has_cooperative_matrix) return false;
  return std::any_of(coopmat_shapes.begin(), coopmat_shapes.end(), [&](const CoopMatShape& s) {
    return s.m == m_ && s.n == n_ && s.k == k_ && s.a_type == ab && s.b_type == ab && s.c_type == acc &&
           s.result_type == acc && s.scope == VK_SCOPE_SUBGROUP_KHR && !s.saturating_accumulation;
  });
}

uint64_t DeviceInfo::device_local_bytes() const {
  uint64_t best = 0;
  for (const auto& h : heaps)
    if (h.device_local) best = std::max(best, h.size);
  return best;
}

bool DeviceInfo::unified_memory() const {
  if (type != VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU && type != VK_PHYSICAL_DEVICE_TYPE_CPU) return false;
  const uint64_t largest = device_local_bytes();
  return std::any_of(heaps.begin(), heaps.end(),
                     [&](const MemoryHeapInfo& h) { return h.device_local && h.size == largest && h.host_visible; });
}

uint64_t DeviceInfo::unified_bytes() const {
  uint64_t total = 0;
  for (const auto& h : heaps) total += h.budget_known ? h.budget : h.size;
  return total;
}

uint64_t DeviceInfo::memory_capacity() const { return unified_memory() ? unified_bytes() : device_local_bytes(); }

std::string DeviceInfo::memory_summary() const {
  if (!unified_memory())
    return cat("dedicated (", format_bytes(double(memory_capacity())),
               " device-local); weights copied in through staging buffers");
  return cat("unified with the host (", format_bytes(double(memory_capacity())), " usable over ", heaps.size(),
             heaps.size() == 1 ? " heap" : " heaps", "); weights ",
             imports_host_memory() ? "used in place from the mapped file (VK_EXT_external_memory_host)"
                                   : "copied straight into mapped device memory (no staging)");
}

DeviceInfo query_device_info(const Instance& instance, VkPhysicalDevice device, uint32_t index) {
  DeviceInfo info;
  info.index = index;
  VkPhysicalDeviceProperties props{};
  vkGetPhysicalDeviceProperties(device, &props);
  info.name = props.deviceName;
  info.type = props.deviceType;
  info.vendor_id = props.vendorID;
  info.device_id = props.deviceID;
  info.api_version = props.apiVersion;
  info.driver_version = props.driverVersion;
  std::memcpy(info.pipeline_cache_uuid.data(), props.pipelineCacheUUID, VK_UUID_SIZE);
  const VkPhysicalDeviceLimits& limits = props.limits;
  info.timestamp_period_ns = limits.timestampPeriod;
  info.timestamp_compute_and_graphics = limits.timestampComputeAndGraphics;
  info.max_shared_memory = limits.maxComputeSharedMemorySize;
  for (int i = 0; i < 3; ++i) {
    info.max_workgroup_size[i] = limits.maxComputeWorkGroupSize[i];
    info.max_workgroup_count[i] = limits.maxComputeWorkGroupCount[i];
  }
  info.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  info.max_push_constants_size = limits.maxPushConstantsSize;
  info.max_storage_buffer_range = limits.maxStorageBufferRange;
  info.min_storage_buffer_offset_alignment = limits.minStorageBufferOffsetAlignment;
  info.non_coherent_atom_size = limits.nonCoherentAtomSize;
  // Vulkan 1.0 guarantees nothing better; maintenance3 below usually reports more.
  info.max_memory_allocation_size = limits.maxStorageBufferRange;

  // What we may query is bounded by both the device's and the instance's version.
  const uint32_t version = std::min(props.apiVersion, instance.api_version());
  const bool v11 = version >= VK_API_VERSION_1_1, v12 = version >= VK_API_VERSION_1_2,
             v13 = version >= VK_API_VERSION_1_3;
  const auto exts = device_extensions(device);
  info.has_push_descriptor = has(exts, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  info.has_memory_budget = has(exts, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  info.has_pipeline_executable_properties = has(exts, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  info.has_integer_dot_product_ext = has(exts, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  info.has_subgroup_size_control_ext = has(exts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  info.has_portability_subset = has(exts, "VK_KHR_portability_subset");
  info.has_external_memory_host = v11 && has(exts, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  const bool coopmat_ext = has(exts, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
  const bool size_control = v13 || info.has_subgroup_size_control_ext;

  // --- properties -------------------------------------------------------------------------------------------------
  auto props2 = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  auto subgroup = vk_struct<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto maint3 = vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto driver = vk_struct<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  auto size_props = vk_struct<VkPhysicalDeviceSubgroupSizeControlProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES);
  auto maint4 = vk_struct<VkPhysicalDeviceMaintenance4Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES);
  auto push_props = vk_struct<VkPhysicalDevicePushDescriptorPropertiesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR);
  auto host_props = vk_struct<VkPhysicalDeviceExternalMemoryHostPropertiesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT);
  auto sm_props = vk_struct<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
  auto dot_props = vk_struct<VkPhysicalDeviceShaderIntegerDotProductProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES);
  auto core_props = vk_struct<VkPhysicalDeviceShaderCorePropertiesAMD>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD);
  const bool have_sm = has(exts, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  const bool have_core = has(exts, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
  PNextChain pc{&props2.pNext};
  if (have_sm) pc.add(sm_props);
  if (have_core) pc.add(core_props);
  if (info.has_push_descriptor) pc.add(push_props);
  if (info.has_external_memory_host) pc.add(host_props);
  if (v11) pc.add(subgroup);
  if (v11 || has(exts, VK_KHR_MAINTENANCE_3_EXTENSION_NAME)) pc.add(maint3);
  const bool have_driver = v12 || has(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  if (have_driver) pc.add(driver);
  if (size_control) pc.add(size_props);
  const bool have_maint4 = v13 || has(exts, VK_KHR_MAINTENANCE_4_EXTENSION_NAME);
  if (have_maint4) pc.add(maint4);
  const bool have_dot = v13 || info.has_integer_dot_product_ext;
  if (have_dot) pc.add(dot_props);
  vkGetPhysicalDeviceProperties2(device, &props2);
  info.integer_dot_product_accelerated = have_dot && dot_props.integerDotProduct4x8BitPackedSignedAccelerated;

  if (v11) {
    info.subgroup_size = subgroup.subgroupSize;
    info.subgroup_operations = subgroup.supportedOperations;
    info.subgroup_ops_in_compute = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    info.max_memory_allocation_size = maint3.maxMemoryAllocationSize;
  }
  info.min_subgroup_size = info.max_subgroup_size = info.subgroup_size;
  if (have_driver) {
    info.driver_id = driver.driverID;
    info.driver_name = driver.driverName;
    info.driver_info = driver.driverInfo;
  }
  if (have_maint4) info.max_buffer_size = maint4.maxBufferSize;
  if (have_sm) info.compute_units = sm_props.shaderSMCount;
  else if (have_core)
    info.compute_units = core_props.shaderEngineCount * core_props.shaderArraysPerEngineCount *
                         core_props.computeUnitsPerShaderArray;
  if (info.has_push_descriptor) info.max_push_descriptors = push_props.maxPushDescriptors;
  if (info.has_external_memory_host) info.min_imported_host_pointer_alignment = host_props.minImportedHostPointerAlignment;

  // --- features ---------------------------------------------------------------------------------------------------
  auto features2 = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  auto storage16 = vk_struct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  auto f16i8 = vk_struct<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
  auto storage8 = vk_struct<VkPhysicalDevice8BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES);
  auto timeline = vk_struct<VkPhysicalDeviceTimelineSemaphoreFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES);
  auto vmm = vk_struct<VkPhysicalDeviceVulkanMemoryModelFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
  auto ext_types = vk_struct<VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES);
  auto size_feat = vk_struct<VkPhysicalDeviceSubgroupSizeControlFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES);
  auto dot = vk_struct<VkPhysicalDeviceShaderIntegerDotProductFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES);
  auto coopmat = vk_struct<VkPhysicalDeviceCooperativeMatrixFeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR);
  PNextChain fc{&features2.pNext};
  if (v11 || has(exts, VK_KHR_16BIT_STORAGE_EXTENSION_NAME)) fc.add(storage16);
  if (v12 || has(exts, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME)) fc.add(f16i8);
  if (v12 || has(exts, VK_KHR_8BIT_STORAGE_EXTENSION_NAME)) fc.add(storage8);
  if (v12 || has(exts, VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME)) fc.add(timeline);
  if (v12 || has(exts, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME)) fc.add(vmm);
  if (v12 || has(exts, VK_KHR_SHADER_SUBGROUP_EXTENDED_TYPES_EXTENSION_NAME)) fc.add(ext_types);
  if (size_control) fc.add(size_feat);
  if (v13 || has(exts, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) fc.add(dot);
  if (coopmat_ext) fc.add(coopmat);
  vkGetPhysicalDeviceFeatures2(device, &features2);

  info.shader_int16 = features2.features.shaderInt16;
  info.shader_int64 = features2.features.shaderInt64;
  info.storage_buffer_16bit = storage16.storageBuffer16BitAccess;
  info.shader_float16 = f16i8.shaderFloat16;
  info.shader_int8 = f16i8.shaderInt8;
  info.storage_buffer_8bit = storage8.storageBuffer8BitAccess;
  info.timeline_semaphore = timeline.timelineSemaphore;
  info.vulkan_memory_model = vmm.vulkanMemoryModel;
  info.vulkan_memory_model_device_scope = vmm.vulkanMemoryModelDeviceScope;
  info.subgroup_extended_types = ext_types.shaderSubgroupExtendedTypes;
  info.integer_dot_product = dot.shaderIntegerDotProduct;
  info.has_cooperative_matrix = coopmat_ext && coopmat.cooperativeMatrix;
  if (size_control && size_feat.subgroupSizeControl) {
    info.subgroup_size_control =
        (size_props.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 && size_props.minSubgroupSize > 0;
    info.compute_full_subgroups = size_feat.computeFullSubgroups;
    if (size_props.minSubgroupSize > 0) {
      info.min_subgroup_size = size_props.minSubgroupSize;
      info.max_subgroup_size = size_props.maxSubgroupSize;
    }
    info.max_compute_workgroup_subgroups = size_props.maxComputeWorkgroupSubgroups;
  }
  if (info.has_cooperative_matrix) query_coopmat_shapes(device, info);

  // --- memory -----------------------------------------------------------------------------------------------------
  auto mem2 = vk_struct<VkPhysicalDeviceMemoryProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  auto budget = vk_struct<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
  if (info.has_memory_budget) mem2.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(device, &mem2);
  const auto& mem = mem2.memoryProperties;
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
    MemoryHeapInfo heap;
    heap.size = mem.memoryHeaps[h].size;
    heap.device_local = (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    for (uint32_t t = 0; t < mem.memoryTypeCount; ++t)
      if (mem.memoryTypes[t].heapIndex == h && (mem.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
        heap.host_visible = true;
    if (info.has_memory_budget) {
      heap.budget_known = true;
      heap.budget = budget.heapBudget[h];
      heap.usage = budget.heapUsage[h];
    }
    info.heaps.push_back(heap);
  }

  // --- can GRETA use it? ------------------------------------------------------------------------------------------
  pick_compute_queue(device, info);
  if (version < VK_API_VERSION_1_2)
    info.unusable_reason = cat("Vulkan ", version_string(version), " (GRETA needs 1.2)");
  else if (info.compute_queue_family < 0)
    info.unusable_reason = "no compute queue";
  else if (!info.timeline_semaphore)
    info.unusable_reason = "no timeline semaphores";
  info.usable = info.unusable_reason.empty();
  return info;
}

int pick_default_device(const std::vector<DeviceInfo>& devices) {
  const VkPhysicalDeviceType order[] = {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                                        VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, VK_PHYSICAL_DEVICE_TYPE_CPU,
                                        VK_PHYSICAL_DEVICE_TYPE_OTHER};
  for (VkPhysicalDeviceType type : order)
    for (const auto& d : devices)
      if (d.usable && d.type == type) return int(d.index);
  return -1;
}

}  // namespace greta::vk
