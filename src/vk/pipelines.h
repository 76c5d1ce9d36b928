// Compute pipelines, looked up by the generated typed ShaderId (never by string), specialized with constants, and
// backed by a pipeline cache persisted on disk.
//
//   Pipelines pipelines(ctx);
//   const ComputePipeline& fill = pipelines.get(ShaderId::fill_u32, {{0, 256}});   // spec id 0 = workgroup size x
//
// Per pipeline: one descriptor set layout with as many storage-buffer bindings as the shader declares (reflected from
// its SPIR-V), a push-constant range of the shader's block size, and the VkPipeline. With VK_KHR_push_descriptor the
// set layout is a push-descriptor layout (no descriptor pools at all); otherwise RecordedSequence allocates sets.
// Variants: #defines choose types/extensions at build time (shaders/shaders.cmake); workgroup sizes and tiles are
// specialization constants chosen here, so one SPIR-V serves every device (subgroup sizes 8..64, never hard-coded).
#pragma once
#include <volk.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vk/handles.h"
#include "vk/shader_ids.h"
#include "vk/spirv_reflect.h"

namespace greta::vk {

class Context;

struct SpecConstant {
  uint32_t id = 0;
  uint32_t value = 0;  // 32-bit: int/uint as is, bool as 0/1, float by its bits
  auto operator<=>(const SpecConstant&) const = default;
};

struct PipelineOptions {
  // Pin the subgroup size (VK_EXT_subgroup_size_control / 1.3); 0 = the driver's choice. Must lie within the
  // device's [min, max] subgroup size.
  uint32_t required_subgroup_size = 0;
  // Require full subgroups (local_size_x must be a multiple of the subgroup size).
  bool full_subgroups = false;
  auto operator<=>(const PipelineOptions&) const = default;
};

class ComputePipeline {
public:
  ShaderId shader() const { return shader_; }
  const std::string& name() const { return name_; }
  VkPipeline handle() const { return pipeline_.get(); }
  VkPipelineLayout layout() const { return layout_.get(); }
  VkDescriptorSetLayout set_layout() const { return set_layout_.get(); }
  uint32_t binding_count() const { return reflection_.binding_count; }
  uint32_t push_constant_bytes() const { return reflection_.push_constant_bytes; }
  std::array<uint32_t, 3> local_size() const { return local_size_; }  // after specialization
  bool uses_push_descriptors() const { return push_descriptors_; }
  const ShaderReflection& reflection() const { return reflection_; }

private:
  friend class Pipelines;
  ShaderId shader_{};
  std::string name_;
  ShaderReflection reflection_;
  std::array<uint32_t, 3> local_size_{1, 1, 1};
  bool push_descriptors_ = false;
  UniqueDescriptorSetLayout set_layout_;
  UniquePipelineLayout layout_;
  UniquePipeline pipeline_;
};

// The VkPipelineCache, loaded from and saved to <cache dir>/vk-pipelines-<vendor>-<device>-<cache uuid>.bin.
// Data whose header doesn't match this device/driver is ignored. Failing to read or write the file is a warning
// (Context::warn), never an error.
class PipelineCache {
public:
  explicit PipelineCache(Context& context);
  ~PipelineCache();  // saves when pipelines were added
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  VkPipelineCache handle() const { return cache_.get(); }
  const std::string& path() const { return path_; }  // empty when not persisted
  size_t loaded_bytes() const { return loaded_bytes_; }  // size of the data accepted at load; 0 = started empty
  void mark_dirty() { dirty_ = true; }
  // Writes the cache now (atomically: temp file + rename). Returns false, after a warning, when it could not.
  bool save();

private:
  Context* context_;
  std::string path_;
  size_t loaded_bytes_ = 0;
  bool dirty_ = false;
  UniquePipelineCache cache_;
};

// The default cache directory: $GRETA_CACHE_DIR, else $XDG_CACHE_HOME/greta (absolute paths only), else
// $HOME/.cache/greta; empty when none of them is set.
std::string default_cache_dir();

class Pipelines {
public:
  explicit Pipelines(Context& context);
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // The pipeline for (shader, specialization, options), created on first use. The reference stays valid for the
  // lifetime of this object. Throws greta::Error when the variant was not compiled into this build, when the device
  // lacks what the shader needs (capabilities, subgroup size control), when a spec id doesn't exist in the shader,
  // or when the workgroup size exceeds the device's limits.
  const ComputePipeline& get(ShaderId shader, std::initializer_list<SpecConstant> spec = {},
                             const PipelineOptions& options = {});
  const ComputePipeline& get(ShaderId shader, std::span<const SpecConstant> spec, const PipelineOptions& options);

  size_t size() const { return pipelines_.size(); }
  PipelineCache& cache() { return cache_; }

private:
  struct Key {
    ShaderId shader;
    std::vector<SpecConstant> spec;  // sorted by id
    PipelineOptions options;
    auto operator<=>(const Key&) const = default;
  };
  std::unique_ptr<ComputePipeline> create(const Key& key);
  void check_capabilities(const ShaderReflection& r, const char* name) const;

  Context* context_;
  PipelineCache cache_;
  std::map<Key, std::unique_ptr<ComputePipeline>> pipelines_;
};

// Workgroup count along one dimension so that `groups * local_size` covers `items`, capped at the device limit
// (shaders loop over the rest: every GRETA elementwise shader is a grid-stride loop).
uint32_t group_count(uint64_t items, uint32_t local_size, uint32_t max_groups);

}  // namespace greta::vk
