#include "vk/pipelines.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/error.h"
#include "vk/check.h"
#include "vk/context.h"

namespace greta::vk {

namespace fs = std::filesystem;

namespace {

// GRETA_VK_PIPELINE_STATS=1: one stderr line per pipeline executable with every statistic the driver reports
// (VK_KHR_pipeline_executable_properties), e.g. register counts and spills, to explain a kernel's speed.
void print_statistics(const DeviceDispatch& d, VkPipeline pipeline, const char* name, const std::vector<SpecConstant>& spec) {
  auto pipeline_info = vk_struct<VkPipelineInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR);
  pipeline_info.pipeline = pipeline;
  uint32_t count = 0;
  GRETA_VK_CHECK(d.fn.vkGetPipelineExecutablePropertiesKHR(d.device, &pipeline_info, &count, nullptr));
  std::string spec_text;
  for (const SpecConstant& s : spec) spec_text += cat(spec_text.empty() ? "" : " ", s.id, "=", s.value);
  for (uint32_t e = 0; e < count; ++e) {
    auto exec_info = vk_struct<VkPipelineExecutableInfoKHR>(VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR);
    exec_info.pipeline = pipeline;
    exec_info.executableIndex = e;
    uint32_t n = 0;
    GRETA_VK_CHECK(d.fn.vkGetPipelineExecutableStatisticsKHR(d.device, &exec_info, &n, nullptr));
    std::vector<VkPipelineExecutableStatisticKHR> stats(n, vk_struct<VkPipelineExecutableStatisticKHR>(
                                                               VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR));
    GRETA_VK_CHECK(d.fn.vkGetPipelineExecutableStatisticsKHR(d.device, &exec_info, &n, stats.data()));
    std::string line = cat("pipeline statistics: ", name, " [", spec_text, "]");
    for (uint32_t i = 0; i < n; ++i) {
      const auto& v = stats[i].value;
      switch (stats[i].format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: line += cat("; ", stats[i].name, " ", v.b32 ? "yes" : "no"); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: line += cat("; ", stats[i].name, " ", v.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: line += cat("; ", stats[i].name, " ", v.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: line += cat("; ", stats[i].name, " ", v.f64); break;
        default: break;
      }
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

std::string hex(const uint8_t* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[bytes[i] >> 4];
    s += digits[bytes[i] & 15];
  }
  return s;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x", v);
  return buf;
}

// VkPipelineCacheHeaderVersionOne: 16 bytes of fields, then the 16-byte pipelineCacheUUID. Drivers are supposed to
// reject foreign data, but some crash on it, so we check the header ourselves before handing data over.
bool header_matches(const std::vector<char>& data, const DeviceInfo& info) {
  if (data.size() < 32) return false;
  uint32_t fields[4];
  std::memcpy(fields, data.data(), sizeof fields);
  return fields[0] >= 32 && fields[0] <= data.size() && fields[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
         fields[2] == info.vendor_id && fields[3] == info.device_id &&
         std::memcmp(data.data() + 16, info.pipeline_cache_uuid.data(), VK_UUID_SIZE) == 0;
}

constexpr uintmax_t k_max_cache_file = uintmax_t(1) << 30;  // anything larger is not ours

}  // namespace

std::string default_cache_dir() {
  if (const char* dir = std::getenv("GRETA_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/') return cat(xdg, "/greta");
  if (const char* home = std::getenv("HOME"); home && *home) return cat(home, "/.cache/greta");
  return "";
}

uint32_t group_count(uint64_t items, uint32_t local_size, uint32_t max_groups) {
  GRETA_CHECK(local_size > 0);
  const uint64_t groups = (items + local_size - 1) / local_size;
  return uint32_t(std::clamp<uint64_t>(groups, 1, max_groups));
}

// --- PipelineCache --------------------------------------------------------------------------------------------------

PipelineCache::PipelineCache(Context& context) : context_(&context) {
  std::vector<char> data;
  const ContextOptions& opts = context.options();
  if (opts.persist_pipeline_cache) {
    const std::string dir = opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir;
    const DeviceInfo& info = context.info();
    if (!dir.empty())
      path_ = cat(dir, "/vk-pipelines-", hex32(info.vendor_id), "-", hex32(info.device_id), "-",
                  hex(info.pipeline_cache_uuid.data(), VK_UUID_SIZE), ".bin");
  }
  if (!path_.empty()) {
    std::error_code ec;
    const auto size = fs::file_size(path_, ec);
    if (!ec && size > 0 && size < k_max_cache_file) {
      std::ifstream in(path_, std::ios::binary);
      data.resize(size_t(size));
      if (!in.read(data.data(), std::streamsize(data.size()))) {
        context.warn(cat("could not read the pipeline cache ", path_, "; starting with an empty cache"));
        data.clear();
      } else if (!header_matches(data, context.info())) {
        data.clear();  // another driver version or device: stale, not an error
      }
    }
  }
  auto ci = vk_struct<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  ci.initialDataSize = data.size();
  ci.pInitialData = data.empty() ? nullptr : data.data();
  VkPipelineCache cache = VK_NULL_HANDLE;
  GRETA_VK_CHECK(context.fn().vkCreatePipelineCache(context.device(), &ci, nullptr, &cache));
  cache_ = UniquePipelineCache(context.dispatch(), cache);
  loaded_bytes_ = data.size();
}

PipelineCache::~PipelineCache() {
  if (dirty_) {
    try {
      save();
    } catch (...) {
      // save() reports its own failures as warnings; nothing may escape a destructor.
    }
  }
}

bool PipelineCache::save() {
  if (path_.empty()) return false;
  size_t size = 0;
  GRETA_VK_CHECK(context_->fn().vkGetPipelineCacheData(context_->device(), cache_.get(), &size, nullptr));
  std::vector<char> data(size);
  GRETA_VK_CHECK(context_->fn().vkGetPipelineCacheData(context_->device(), cache_.get(), &size, data.data()));
  data.resize(size);
  std::error_code ec;
  const fs::path path(path_);
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    context_->warn(cat("could not create the pipeline cache directory ", path.parent_path().string(), ": ",
                       ec.message()));
    return false;
  }
  // Write a temporary file and rename it over the old one, so a concurrent reader never sees half a file.
  const std::string tmp = cat(path_, ".tmp", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(data.data(), std::streamsize(data.size())) || !out.flush()) {
      context_->warn(cat("could not write the pipeline cache ", tmp));
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    context_->warn(cat("could not write the pipeline cache ", path_, ": ", ec.message()));
    fs::remove(tmp, ec);
    return false;
  }
  dirty_ = false;
  return true;
}

// --- Pipelines ------------------------------------------------------------------------------------------------------

Pipelines::Pipelines(Context& context) : context_(&context), cache_(context) {}

Pipelines::~Pipelines() = default;

const ComputePipeline& Pipelines::get(ShaderId shader, std::initializer_list<SpecConstant> spec,
                                      const PipelineOptions& options) {
  return get(shader, std::span<const SpecConstant>(spec.begin(), spec.size()), options);
}

const ComputePipeline& Pipelines::get(ShaderId shader, std::span<const SpecConstant> spec,
                                      const PipelineOptions& options) {
  Key key{shader, std::vector<SpecConstant>(spec.begin(), spec.end()), options};
  std::sort(key.spec.begin(), key.spec.end());
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return *it->second;
  auto pipeline = create(key);
  const ComputePipeline& ref = *pipeline;
  pipelines_.emplace(std::move(key), std::move(pipeline));
  cache_.mark_dirty();
  return ref;
}

void Pipelines::check_capabilities(const ShaderReflection& r, const char* name) const {
  const EnabledFeatures& f = context_->features();
  const DeviceInfo& info = context_->info();
  struct Need {
    uint32_t capability;
    bool available;
    const char* what;
  };
  const Need needs[] = {
      {spv_capability::float16, f.shader_float16, "shaderFloat16"},
      {spv_capability::int8, f.shader_int8, "shaderInt8"},
      {spv_capability::int16, f.shader_int16, "shaderInt16"},
      {spv_capability::int64, false, "shaderInt64 (not enabled by GRETA)"},
      {spv_capability::float64, false, "shaderFloat64 (not enabled by GRETA)"},
      {spv_capability::storage_buffer_16bit, f.storage_buffer_16bit, "storageBuffer16BitAccess"},
      {spv_capability::uniform_and_storage_buffer_16bit, f.storage_buffer_16bit, "uniformAndStorageBuffer16BitAccess"},
      {spv_capability::storage_buffer_8bit, f.storage_buffer_8bit, "storageBuffer8BitAccess"},
      {spv_capability::uniform_and_storage_buffer_8bit, f.storage_buffer_8bit, "uniformAndStorageBuffer8BitAccess"},
      {spv_capability::vulkan_memory_model, f.vulkan_memory_model, "vulkanMemoryModel"},
      {spv_capability::cooperative_matrix_khr, f.cooperative_matrix, "VK_KHR_cooperative_matrix"},
      {spv_capability::group_non_uniform, info.subgroup_ops_in_compute, "subgroup operations in compute shaders"},
  };
  for (const Need& n : needs)
    if (r.has_capability(n.capability) && !n.available)
      fail("shader ", name, " needs ", n.what, ", which device ", info.index, " (", info.name, ") lacks");
}

std::unique_ptr<ComputePipeline> Pipelines::create(const Key& key) {
  const ShaderBlob& blob = shader_blob(key.shader);
  if (!blob.words)
    fail("shader ", blob.name, " was not compiled into this build (its REQUIRES feature was missing from glslang)");
  const DeviceInfo& info = context_->info();
  const DeviceDispatch& d = context_->dispatch();

  auto p = std::make_unique<ComputePipeline>();
  p->shader_ = key.shader;
  p->name_ = blob.name;
  p->reflection_ = reflect_spirv(blob.words, blob.word_count);
  const ShaderReflection& r = p->reflection_;
  check_capabilities(r, blob.name);
  if (r.push_constant_bytes > info.max_push_constants_size)
    fail("shader ", blob.name, " has ", r.push_constant_bytes, " bytes of push constants; the device allows ",
         info.max_push_constants_size);

  // Specialization: validate ids, then the resulting workgroup size against the device's limits.
  p->local_size_ = r.local_size;
  for (const SpecConstant& s : key.spec) {
    if (!r.has_spec_id(s.id)) fail("shader ", blob.name, " has no specialization constant ", s.id);
    for (int i = 0; i < 3; ++i)
      if (r.local_size_spec_id[i] == int32_t(s.id)) p->local_size_[i] = s.value;
  }
  for (size_t i = 1; i < key.spec.size(); ++i)
    if (key.spec[i].id == key.spec[i - 1].id) fail("specialization constant ", key.spec[i].id, " given twice");
  const auto& ls = p->local_size_;
  const uint64_t invocations = uint64_t(ls[0]) * ls[1] * ls[2];
  for (int i = 0; i < 3; ++i)
    if (ls[i] == 0 || ls[i] > info.max_workgroup_size[i])
      fail("shader ", blob.name, ": workgroup size ", ls[0], "x", ls[1], "x", ls[2], " exceeds the device's maximum ",
           info.max_workgroup_size[0], "x", info.max_workgroup_size[1], "x", info.max_workgroup_size[2]);
  if (invocations > info.max_workgroup_invocations)
    fail("shader ", blob.name, ": ", invocations, " invocations per workgroup exceed the device's ",
         info.max_workgroup_invocations);

  // Subgroup size control.
  const PipelineOptions& o = key.options;
  auto required_size = vk_struct<VkPipelineShaderStageRequiredSubgroupSizeCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO);
  VkPipelineShaderStageCreateFlags stage_flags = 0;
  const void* stage_next = nullptr;
  if (o.required_subgroup_size) {
    const uint32_t s = o.required_subgroup_size;
    if (!context_->features().subgroup_size_control)
      fail("shader ", blob.name, " asks for subgroup size ", s, " but the device has no subgroup size control");
    if (s < info.min_subgroup_size || s > info.max_subgroup_size || (s & (s - 1)) != 0)
      fail("shader ", blob.name, " asks for subgroup size ", s, "; the device supports ", info.min_subgroup_size, "..",
           info.max_subgroup_size);
    if (invocations > uint64_t(info.max_compute_workgroup_subgroups) * s)
      fail("shader ", blob.name, ": ", invocations, " invocations need more than the device's ",
           info.max_compute_workgroup_subgroups, " subgroups of ", s);
    required_size.requiredSubgroupSize = s;
    stage_next = &required_size;
  }
  if (o.full_subgroups) {
    if (!context_->features().compute_full_subgroups)
      fail("shader ", blob.name, " asks for full subgroups, which the device does not support");
    const uint32_t s = o.required_subgroup_size ? o.required_subgroup_size : info.max_subgroup_size;
    if (ls[0] % s != 0)
      fail("shader ", blob.name, ": full subgroups need local_size_x (", ls[0], ") to be a multiple of ", s);
    stage_flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }

  // Descriptor set layout: bindings 0..n-1, all storage buffers, compute stage.
  p->push_descriptors_ = context_->features().push_descriptors && r.binding_count <= info.max_push_descriptors;
  std::vector<VkDescriptorSetLayoutBinding> bindings(r.binding_count);
  for (uint32_t b = 0; b < r.binding_count; ++b) {
    bindings[b].binding = b;
    bindings[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[b].descriptorCount = 1;
    bindings[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  auto set_info = vk_struct<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
  set_info.flags = p->push_descriptors_ ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0;
  set_info.bindingCount = r.binding_count;
  set_info.pBindings = bindings.data();
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  GRETA_VK_CHECK(d.fn.vkCreateDescriptorSetLayout(d.device, &set_info, nullptr, &set_layout));
  p->set_layout_ = UniqueDescriptorSetLayout(d, set_layout);

  VkPushConstantRange push_range{VK_SHADER_STAGE_COMPUTE_BIT, 0, (r.push_constant_bytes + 3) / 4 * 4};
  auto layout_info = vk_struct<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &set_layout;
  layout_info.pushConstantRangeCount = r.push_constant_bytes ? 1 : 0;
  layout_info.pPushConstantRanges = &push_range;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  GRETA_VK_CHECK(d.fn.vkCreatePipelineLayout(d.device, &layout_info, nullptr, &layout));
  p->layout_ = UniquePipelineLayout(d, layout);

  auto module_info = vk_struct<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
  module_info.codeSize = blob.word_count * 4;
  module_info.pCode = blob.words;
  VkShaderModule module_handle = VK_NULL_HANDLE;
  GRETA_VK_CHECK(d.fn.vkCreateShaderModule(d.device, &module_info, nullptr, &module_handle));
  UniqueShaderModule module(d, module_handle);  // only needed until the pipeline exists

  std::vector<VkSpecializationMapEntry> entries;
  std::vector<uint32_t> values;
  for (const SpecConstant& s : key.spec) {
    entries.push_back({s.id, uint32_t(values.size() * 4), 4});
    values.push_back(s.value);
  }
  VkSpecializationInfo spec_info{};
  spec_info.mapEntryCount = uint32_t(entries.size());
  spec_info.pMapEntries = entries.data();
  spec_info.dataSize = values.size() * 4;
  spec_info.pData = values.data();

  auto pipeline_info = vk_struct<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
  pipeline_info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  pipeline_info.stage.pNext = stage_next;
  pipeline_info.stage.flags = stage_flags;
  pipeline_info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pipeline_info.stage.module = module.get();
  pipeline_info.stage.pName = "main";
  pipeline_info.stage.pSpecializationInfo = entries.empty() ? nullptr : &spec_info;
  pipeline_info.layout = layout;
  if (context_->features().pipeline_statistics) pipeline_info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  VkPipeline pipeline = VK_NULL_HANDLE;
  GRETA_VK_CHECK(d.fn.vkCreateComputePipelines(d.device, cache_.handle(), 1, &pipeline_info, nullptr, &pipeline));
  p->pipeline_ = UniquePipeline(d, pipeline);
  context_->set_object_name(VK_OBJECT_TYPE_PIPELINE, uint64_t(pipeline), blob.name);
  if (context_->features().pipeline_statistics) print_statistics(d, pipeline, blob.name, key.spec);
  return p;
}

}  // namespace greta::vk
