// Just enough SPIR-V reflection to build a compute pipeline without hand-written metadata: the storage-buffer
// bindings of set 0, the push-constant block size, the workgroup size (and which specialization constants set it),
// every specialization constant id, and the declared capabilities (checked against the device's enabled features,
// so a shader the device cannot run fails with a clear error instead of a validation error or a driver crash).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace greta::vk {

struct ShaderReflection {
  uint32_t binding_count = 0;        // storage buffers at set 0, bindings 0..n-1
  uint32_t push_constant_bytes = 0;  // 0 = no push-constant block
  std::array<uint32_t, 3> local_size{1, 1, 1};        // defaults (before specialization)
  std::array<int32_t, 3> local_size_spec_id{-1, -1, -1};  // spec constant id setting each dimension, or -1
  std::vector<uint32_t> spec_ids;    // every SpecId, sorted
  std::vector<uint32_t> capabilities;  // OpCapability operands (spv::Capability values)

  bool has_capability(uint32_t capability) const;
  bool has_spec_id(uint32_t id) const;
};

// Throws greta::Error for malformed SPIR-V and for layouts GRETA's pipelines don't support (descriptor sets other
// than 0, non-storage-buffer descriptors, gaps in the binding numbers).
ShaderReflection reflect_spirv(const uint32_t* words, size_t word_count);

// SPIR-V capability numbers GRETA checks.
namespace spv_capability {
constexpr uint32_t float16 = 9;
constexpr uint32_t float64 = 10;
constexpr uint32_t int64 = 11;
constexpr uint32_t int16 = 22;
constexpr uint32_t int8 = 39;
constexpr uint32_t group_non_uniform = 61;
constexpr uint32_t storage_buffer_16bit = 4433;
constexpr uint32_t uniform_and_storage_buffer_16bit = 4434;
constexpr uint32_t storage_buffer_8bit = 4448;
constexpr uint32_t uniform_and_storage_buffer_8bit = 4449;
constexpr uint32_t vulkan_memory_model = 5345;
constexpr uint32_t cooperative_matrix_khr = 6022;
}  // namespace spv_capability

}  // namespace greta::vk
