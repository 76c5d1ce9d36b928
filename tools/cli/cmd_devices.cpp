// greta-vk devices: every Vulkan device with the facts GRETA's kernels and memory planning depend on.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "hip/hip_loader.h"
#include "vk/device_info.h"
#include "vk/instance.h"

namespace greta::cli {

namespace {

const OptionSpec k_options[] = {
    {"device", "d", true, "show only device N"},
    {"validation", nullptr, false, "enable the Vulkan validation layer (also GRETA_VK_VALIDATION=1)"},
    {"help", "h", false, "show this help"},
};

const char* yes_no(bool b) { return b ? "yes" : "no"; }

std::string uuid_string(const std::array<uint8_t, 16>& u) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < u.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%02x", u[i]);
    s += buf;
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

std::string subgroup_ops(VkSubgroupFeatureFlags f) {
  const std::pair<VkSubgroupFeatureFlags, const char*> names[] = {
      {VK_SUBGROUP_FEATURE_BASIC_BIT, "basic"},         {VK_SUBGROUP_FEATURE_VOTE_BIT, "vote"},
      {VK_SUBGROUP_FEATURE_ARITHMETIC_BIT, "arithmetic"}, {VK_SUBGROUP_FEATURE_BALLOT_BIT, "ballot"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_BIT, "shuffle"},     {VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT, "shuffle-relative"},
      {VK_SUBGROUP_FEATURE_CLUSTERED_BIT, "clustered"}, {VK_SUBGROUP_FEATURE_QUAD_BIT, "quad"},
  };
  std::string s;
  for (const auto& [bit, name] : names)
    if (f & bit) s += cat(s.empty() ? "" : " ", name);
  return s.empty() ? "none" : s;
}

void print_device(const vk::DeviceInfo& d, bool is_default) {
  std::printf("[%u] %s (%s)%s\n", d.index, d.name.c_str(), d.type_name().c_str(), is_default ? "  * default" : "");
  std::printf("    %-18s %s\n", "status", d.usable ? "usable" : cat("not usable: ", d.unusable_reason).c_str());
  std::printf("    %-18s %s%s%s  (vendor 0x%04x, device 0x%04x, driver version 0x%08x)\n", "driver",
              d.driver_name.empty() ? "?" : d.driver_name.c_str(), d.driver_info.empty() ? "" : ", ",
              d.driver_info.c_str(), d.vendor_id, d.device_id, d.driver_version);
  std::printf("    %-18s %s\n", "Vulkan API", d.api_version_string().c_str());
  std::printf("    %-18s %s\n", "pipeline cache", uuid_string(d.pipeline_cache_uuid).c_str());
  if (d.compute_queue_family >= 0)
    std::printf("    %-18s family %d%s, timestamps %s\n", "compute queue", d.compute_queue_family,
                d.compute_queue_is_dedicated ? " (compute only)" : " (with graphics)",
                d.timestamp_valid_bits ? cat(d.timestamp_valid_bits, " bits, ", d.timestamp_period_ns, " ns/tick").c_str()
                                       : "none");
  else
    std::printf("    %-18s none\n", "compute queue");
  std::printf("    %-18s size %u (min %u, max %u), size control %s, full subgroups %s, ops in compute: %s\n",
              "subgroups", d.subgroup_size, d.min_subgroup_size, d.max_subgroup_size, yes_no(d.subgroup_size_control),
              yes_no(d.compute_full_subgroups), d.subgroup_ops_in_compute ? subgroup_ops(d.subgroup_operations).c_str() : "none");
  std::printf("    %-18s %s\n", "compute units",
              d.compute_units ? cat(d.compute_units, " (SMs or CUs)").c_str() : "not reported");
  std::printf("    %-18s max size %ux%ux%u, max invocations %u, max count %ux%ux%u\n", "workgroups",
              d.max_workgroup_size[0], d.max_workgroup_size[1], d.max_workgroup_size[2], d.max_workgroup_invocations,
              d.max_workgroup_count[0], d.max_workgroup_count[1], d.max_workgroup_count[2]);
  std::printf("    %-18s %s shared memory, %u B push constants\n", "per workgroup",
              format_bytes(double(d.max_shared_memory)).c_str(), d.max_push_constants_size);
  std::printf("    %-18s fp16 %s, int8 %s, int16 %s, int64 %s, 16-bit storage %s, 8-bit storage %s\n", "shader types",
              yes_no(d.shader_float16), yes_no(d.shader_int8), yes_no(d.shader_int16), yes_no(d.shader_int64),
              yes_no(d.storage_buffer_16bit), yes_no(d.storage_buffer_8bit));
  std::printf("    %-18s subgroup extended types %s, integer dot product %s, memory model %s, timeline semaphores %s\n",
              "shader features", yes_no(d.subgroup_extended_types),
              d.integer_dot_product ? (d.integer_dot_product_accelerated ? "yes (accelerated)" : "yes (emulated)") : "no",
              yes_no(d.vulkan_memory_model), yes_no(d.timeline_semaphore));
  if (!d.has_cooperative_matrix) {
    std::printf("    %-18s none (no VK_KHR_cooperative_matrix)\n", "coopmat");
  } else {
    std::printf("    %-18s %zu shape(s)\n", "coopmat", d.coopmat_shapes.size());
    for (const auto& s : d.coopmat_shapes) std::printf("    %-18s   %s\n", "", s.to_string().c_str());
  }
  for (size_t h = 0; h < d.heaps.size(); ++h) {
    const auto& heap = d.heaps[h];
    std::string flags = heap.device_local ? "device-local" : "host";
    if (heap.host_visible) flags += ", host-visible";
    const std::string budget =
        heap.budget_known ? cat("budget ", format_bytes(double(heap.budget)), ", in use ", format_bytes(double(heap.usage)))
                          : std::string("budget unknown (no VK_EXT_memory_budget)");
    std::printf("    %-18s %zu: %s %s; %s\n", h == 0 ? "memory heaps" : "", h, format_bytes(double(heap.size)).c_str(),
                flags.c_str(), budget.c_str());
  }
  std::printf("    %-18s %s\n", "memory use", d.memory_summary().c_str());
  std::printf("    %-18s max storage buffer range %s, max allocation %s, max buffer %s, offset alignment %llu\n",
              "buffer limits", format_bytes(double(d.max_storage_buffer_range)).c_str(),
              format_bytes(double(d.max_memory_allocation_size)).c_str(),
              d.max_buffer_size ? format_bytes(double(d.max_buffer_size)).c_str() : "n/a",
              static_cast<unsigned long long>(d.min_storage_buffer_offset_alignment));
  std::printf("    %-18s push_descriptor %s, memory_budget %s, subgroup_size_control %s, cooperative_matrix %s\n",
              "extensions", yes_no(d.has_push_descriptor), yes_no(d.has_memory_budget),
              yes_no(d.has_subgroup_size_control_ext || d.subgroup_size_control), yes_no(d.has_cooperative_matrix));
}

}  // namespace

int cmd_devices(int argc, char** argv) {
  Args args(argc, argv, k_options);
  if (args.has("help")) {
    std::printf("usage: greta-vk devices [--device N] [--validation]\n\n%s", usage_options(k_options).c_str());
    return 0;
  }
  args.expect_positional(0, 0, "greta-vk devices [--device N] [--validation]");
  vk::InstanceOptions options;
  options.validation = args.has("validation");
  const auto devices = vk::list_devices(options);
  const int64_t only = args.get_int("device", -1);
  if (args.has("device") && (only < 0 || only >= int64_t(devices.size())))
    fail("Vulkan device index ", only, " is out of range: ", devices.size(), " device(s) found");
  const int default_index = vk::pick_default_device(devices);
  std::printf("%zu Vulkan device(s)\n", devices.size());
  for (const auto& d : devices)
    if (only < 0 || int64_t(d.index) == only) print_device(d, int(d.index) == default_index);
  // HIP devices, when the HIP plugin loads (src/hip/hip_loader.h); otherwise one line saying what is missing.
  if (only < 0) std::printf("%s", hip::describe_devices().c_str());
  return 0;
}

}  // namespace greta::cli
