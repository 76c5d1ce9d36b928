// DeviceInfo: the facts about one Vulkan physical device that GRETA's kernels and memory planning depend on, in a
// plain struct. Filled from an instance alone (no logical device), so `greta-vk devices` can list every device, also
// ones GRETA cannot use (usable == false says why).
#pragma once
#include <volk.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace greta::vk {

class Instance;

// One cooperative-matrix configuration from vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR:
// result[MxN] = A[MxK] * B[KxN] + C[MxN].
struct CoopMatShape {
  uint32_t m = 0, n = 0, k = 0;
  VkComponentTypeKHR a_type{}, b_type{}, c_type{}, result_type{};
  bool saturating_accumulation = false;
  VkScopeKHR scope{};
  // "16x16x16 f16*f16->f32"; C's type is added when it differs from the result's, then " sat" and a non-subgroup scope.
  std::string to_string() const;
};

struct MemoryHeapInfo {
  uint64_t size = 0;
  bool device_local = false;
  bool host_visible = false;  // some memory type of this heap can be mapped
  bool budget_known = false;  // VK_EXT_memory_budget present
  uint64_t budget = 0;        // what this process may allocate in total (valid when budget_known)
  uint64_t usage = 0;         // what this process has allocated (valid when budget_known)
};

struct DeviceInfo {
  uint32_t index = 0;  // position in vkEnumeratePhysicalDevices order; `--device N` takes this
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0, device_id = 0;
  uint32_t api_version = 0;  // the device's, not clamped to the instance's
  uint32_t driver_version = 0;
  VkDriverId driver_id{};
  std::string driver_name, driver_info;  // empty without VK_KHR_driver_properties (Vulkan < 1.2)
  std::array<uint8_t, VK_UUID_SIZE> pipeline_cache_uuid{};

  // Compute queue: the family GRETA submits to (-1 when the device has no compute queue).
  int compute_queue_family = -1;
  bool compute_queue_is_dedicated = false;  // a compute family without graphics
  uint32_t timestamp_valid_bits = 0;        // of that family; 0 = no timestamps
  float timestamp_period_ns = 0;            // nanoseconds per timestamp tick
  bool timestamp_compute_and_graphics = false;

  // Subgroups (never hard-code them: 8 on lavapipe, 32 on NVIDIA, 32/64 on AMD, 8-32 on Intel).
  uint32_t subgroup_size = 0;  // the default size
  uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
  uint32_t max_compute_workgroup_subgroups = 0;
  bool subgroup_size_control = false;  // requiredSubgroupSize on compute pipelines possible
  bool compute_full_subgroups = false;
  bool subgroup_ops_in_compute = false;      // subgroup operations supported in compute shaders
  VkSubgroupFeatureFlags subgroup_operations = 0;

  // Compute limits.
  uint32_t max_shared_memory = 0;  // maxComputeSharedMemorySize, bytes
  std::array<uint32_t, 3> max_workgroup_size{};
  std::array<uint32_t, 3> max_workgroup_count{};
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_push_constants_size = 0;
  // Multiprocessors (NVIDIA SMs from VK_NV_shader_sm_builtins, AMD CUs from VK_AMD_shader_core_properties); 0 where
  // the device reports neither. Sizes the batched GEMMs' split-K (op_matmul.cpp).
  uint32_t compute_units = 0;

  // Buffer limits: a binding covers at most max_storage_buffer_range bytes, an allocation at most
  // max_memory_allocation_size; larger tensors are split (see memory.h, SplitBuffer).
  uint64_t max_storage_buffer_range = 0;
  uint64_t max_memory_allocation_size = 0;
  uint64_t max_buffer_size = 0;  // maintenance4; 0 = not reported
  uint64_t min_storage_buffer_offset_alignment = 0;
  uint64_t non_coherent_atom_size = 0;

  // Shader arithmetic and storage types.
  bool shader_float16 = false;
  bool shader_int8 = false;
  bool shader_int16 = false;
  bool shader_int64 = false;
  bool storage_buffer_16bit = false;
  bool storage_buffer_8bit = false;
  bool subgroup_extended_types = false;  // subgroup operations on 8/16/64-bit types
  bool integer_dot_product = false;      // shaderIntegerDotProduct
  // integerDotProduct4x8BitPackedSignedAccelerated: the driver says dotPacked4x8EXT on signed bytes (the int8 decode
  // kernels' instruction) is faster than the multiplies it stands for (false on lavapipe, which emulates it).
  bool integer_dot_product_accelerated = false;
  bool timeline_semaphore = false;
  bool vulkan_memory_model = false;
  bool vulkan_memory_model_device_scope = false;

  // Extensions GRETA uses when present.
  bool has_push_descriptor = false;
  uint32_t max_push_descriptors = 0;  // bindings one push-descriptor set may hold
  bool has_memory_budget = false;
  bool has_pipeline_executable_properties = false;  // VK_KHR_pipeline_executable_properties (compiler statistics)
  bool has_subgroup_size_control_ext = false;  // needed below Vulkan 1.3 for the size-control fields above
  bool has_cooperative_matrix = false;         // VK_KHR_cooperative_matrix extension and its feature
  bool has_integer_dot_product_ext = false;    // VK_KHR_shader_integer_dot_product (core in 1.3)
  bool has_portability_subset = false;         // must be enabled when present (MoltenVK)
  // VK_EXT_external_memory_host: host memory (here, the mapped model file) imported as device memory, used in place.
  bool has_external_memory_host = false;
  uint64_t min_imported_host_pointer_alignment = 0;  // imported ranges start and end at multiples of it
  std::vector<CoopMatShape> coopmat_shapes;

  std::vector<MemoryHeapInfo> heaps;

  // Can GRETA create a Context on it? It needs Vulkan 1.2, a compute queue and timeline semaphores.
  bool usable = false;
  std::string unusable_reason;

  std::string type_name() const;  // "discrete", "integrated", "virtual", "cpu", "other"
  std::string api_version_string() const;  // "1.3.230"
  bool supports_coopmat(uint32_t m, uint32_t n, uint32_t k, VkComponentTypeKHR ab, VkComponentTypeKHR acc) const;
  uint64_t device_local_bytes() const;  // the largest device-local heap
  // An integrated GPU or a CPU device (lavapipe) whose device-local memory the host can map: system RAM on both
  // sides. Weights are written straight into device memory (no staging copy), and every heap counts towards what
  // the device can hold (unified_bytes), since all of them are the same RAM.
  bool unified_memory() const;
  uint64_t unified_bytes() const;  // the heaps' budgets (VK_EXT_memory_budget), else their sizes, added up
  // Unified memory and VK_EXT_external_memory_host: weights are used in place from the mapped model file.
  bool imports_host_memory() const { return unified_memory() && has_external_memory_host; }
  // Bytes the engine may use on it: unified_bytes() on unified memory, else the largest device-local heap.
  uint64_t memory_capacity() const;
  // How GRETA will use its memory, in one line: "unified with the host (2.0 GiB usable over 1 heap); weights used in
  // place from the mapped file (VK_EXT_external_memory_host)".
  std::string memory_summary() const;
};

// Facts about one physical device of `instance`.
DeviceInfo query_device_info(const Instance& instance, VkPhysicalDevice device, uint32_t index);

// "f16", "f32", "s8", "u32", "bf16", ...
std::string component_type_name(VkComponentTypeKHR type);
// "1.3.230"
std::string version_string(uint32_t vk_version);

// The default choice among `devices`: the first usable discrete GPU, else integrated, else virtual, else CPU, else
// other. Returns -1 when none is usable.
int pick_default_device(const std::vector<DeviceInfo>& devices);

}  // namespace greta::vk
