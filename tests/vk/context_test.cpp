// Instance, device listing, Context creation and the error paths: no loader, no device, bad index, missing layer,
// and the GRETA_VK_CHECK message format.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/error.h"
#include "vk/check.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;

namespace {

bool is_power_of_two(uint32_t v) { return v && (v & (v - 1)) == 0; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const greta::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("list_devices reports plausible facts for every device") {
  const auto devices = list_devices();
  REQUIRE(!devices.empty());
  for (const auto& d : devices) {
    CAPTURE(d.name);
    CHECK(!d.name.empty());
    CHECK(d.api_version >= VK_API_VERSION_1_0);
    if (!d.usable) continue;
    CHECK(is_power_of_two(d.subgroup_size));
    CHECK(d.min_subgroup_size <= d.subgroup_size);
    CHECK(d.subgroup_size <= d.max_subgroup_size);
    // Spec minimums (Vulkan 1.0 / 1.1 required limits).
    CHECK(d.max_storage_buffer_range >= (uint64_t(1) << 27));
    CHECK(d.max_memory_allocation_size >= (uint64_t(1) << 30));
    CHECK(d.max_shared_memory >= 16384);
    CHECK(d.max_workgroup_invocations >= 128);
    CHECK(d.max_workgroup_size[0] >= 128);
    CHECK(d.max_workgroup_count[0] >= 65535);
    CHECK(d.max_push_constants_size >= 128);
    CHECK(d.compute_queue_family >= 0);
    CHECK(!d.heaps.empty());
    CHECK(d.device_local_bytes() > 0);
    for (const auto& s : d.coopmat_shapes) CHECK(s.m * s.n * s.k > 0);
  }
  CHECK(pick_default_device(devices) >= 0);
}

TEST_CASE("CoopMatShape and component names print like '16x16x16 f16*f16->f32'") {
  CoopMatShape s;
  s.m = s.n = s.k = 16;
  s.a_type = s.b_type = VK_COMPONENT_TYPE_FLOAT16_KHR;
  s.c_type = s.result_type = VK_COMPONENT_TYPE_FLOAT32_KHR;
  s.scope = VK_SCOPE_SUBGROUP_KHR;
  CHECK(s.to_string() == "16x16x16 f16*f16->f32");
  s.c_type = VK_COMPONENT_TYPE_FLOAT16_KHR;
  s.saturating_accumulation = true;
  CHECK(s.to_string() == "16x16x16 f16*f16->f32 (C f16) sat");
  CHECK(component_type_name(VK_COMPONENT_TYPE_SINT8_KHR) == "s8");
  CHECK(component_type_name(VkComponentTypeKHR(1000141000)) == "bf16");
  CHECK(version_string(VK_MAKE_API_VERSION(0, 1, 3, 230)) == "1.3.230");
}

TEST_CASE("pick_default_device prefers discrete, then integrated, then cpu, and skips unusable devices") {
  std::vector<DeviceInfo> d(4);
  for (uint32_t i = 0; i < 4; ++i) {
    d[i].index = i;
    d[i].usable = true;
  }
  d[0].type = VK_PHYSICAL_DEVICE_TYPE_CPU;
  d[1].type = VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  d[2].type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  d[3].type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  CHECK(pick_default_device(d) == 2);
  d[2].usable = false;
  CHECK(pick_default_device(d) == 3);
  d[3].usable = false;
  CHECK(pick_default_device(d) == 1);
  d[1].usable = false;
  CHECK(pick_default_device(d) == 0);
  d[0].usable = false;
  CHECK(pick_default_device(d) == -1);
}

TEST_CASE_FIXTURE(VkFixture, "Context enables only features the device reports") {
  Context& c = ctx();
  const DeviceInfo& info = c.info();
  const EnabledFeatures& f = c.features();
  CHECK(info.usable);
  CHECK(c.queue().family() == uint32_t(info.compute_queue_family));
  CHECK((!f.shader_float16 || info.shader_float16));
  CHECK((!f.shader_int8 || info.shader_int8));
  CHECK((!f.storage_buffer_16bit || info.storage_buffer_16bit));
  CHECK((!f.storage_buffer_8bit || info.storage_buffer_8bit));
  CHECK((!f.cooperative_matrix || info.has_cooperative_matrix));
  CHECK((!f.push_descriptors || info.has_push_descriptor));
  CHECK((!f.memory_budget || info.has_memory_budget));
  CHECK((!f.subgroup_size_control || info.subgroup_size_control));
  CHECK(c.max_binding_range() == info.max_storage_buffer_range);
  CHECK(c.max_allocation_size() <= info.max_memory_allocation_size);
  CHECK(c.validation_log());
  CHECK(c.instance().validation_enabled() == validation_requested_by_env());
}

// vk_test_main.cpp holds an instance for the run: with it, instances made and destroyed one after another keep
// finding the device (NVIDIA's driver 580 on an H200 stopped at the 31st without it).
TEST_CASE("40 instances made and destroyed one after another all find the device") {
  const size_t devices = list_devices(InstanceOptions{}).size();
  for (int i = 0; i < 40; ++i) {
    CAPTURE(i);
    Instance instance(InstanceOptions{});
    CHECK(instance.physical_devices().size() == devices);
  }
}

TEST_CASE("a bad device index is a clear error") {
  const std::string message = error_of([] { Context::create(999, test_options()); });
  CHECK(message.find("Vulkan device index 999 is out of range") != std::string::npos);
  CHECK(message.find("device(s) found") != std::string::npos);
}

TEST_CASE("no Vulkan loader is a one-line error") {
  InstanceOptions options;
  options.loader_path = "/nonexistent/libvulkan.so.1";
  CHECK(error_of([&] { list_devices(options); }) == "no Vulkan loader (/nonexistent/libvulkan.so.1) found");
  ContextOptions context_options = test_options();
  context_options.instance = options;
  CHECK(error_of([&] { Context::create(-1, context_options); }) ==
        "no Vulkan loader (/nonexistent/libvulkan.so.1) found");
  // A library that exists but is no Vulkan loader.
  options.loader_path = "libc.so.6";
  CHECK(error_of([&] { list_devices(options); }).find("no Vulkan loader (libc.so.6) found") == 0);
}

TEST_CASE("no Vulkan driver is the error 'no Vulkan device found'") {
  // The loader reads these at instance creation: pointing them at a missing manifest leaves it without drivers.
  ScopedEnv drivers("VK_DRIVER_FILES", "/nonexistent/greta_no_such_icd.json");
  ScopedEnv icds("VK_ICD_FILENAMES", "/nonexistent/greta_no_such_icd.json");
  CHECK(error_of([] { list_devices(); }) == "no Vulkan device found");
  CHECK(error_of([] { Context::create(-1, test_options()); }) == "no Vulkan device found");
}

TEST_CASE("greta-vk devices: lists devices, and exits non-zero with one line without a device") {
  const auto ok = run_process({GRETA_VK_CLI, "devices"}, {});
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.find("subgroups") != std::string::npos);
  CHECK(ok.output.find("max storage buffer range") != std::string::npos);
  CHECK(ok.output.find("coopmat") != std::string::npos);
  CHECK(ok.output.find("memory heaps") != std::string::npos);

  // Validation off here: with it, the loader's own "found no drivers" messages are echoed too.
  const auto none = run_process({GRETA_VK_CLI, "devices"}, {"VK_DRIVER_FILES=/nonexistent/greta_no_such_icd.json",
                                                           "VK_ICD_FILENAMES=/nonexistent/greta_no_such_icd.json",
                                                           "GRETA_VK_VALIDATION=0"});
  CHECK(none.exit_code != 0);
  CHECK(none.output == "greta-vk devices: error: no Vulkan device found\n");

  const auto bad = run_process({GRETA_VK_CLI, "devices", "--device", "77"}, {});
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("out of range") != std::string::npos);
}

TEST_CASE("a missing validation layer is an error when validation is requested") {
  // VK_LAYER_PATH replaces the loader's explicit-layer search path.
  ScopedEnv layers("VK_LAYER_PATH", scratch_dir("no-layers").c_str());
  InstanceOptions options;
  options.validation = true;
  const std::string message = error_of([&] { list_devices(options); });
  CHECK(message.find("VK_LAYER_KHRONOS_validation is not installed") != std::string::npos);
}

TEST_CASE_FIXTURE(VkFixture, "the validation layer's messages are recorded (so a validation error fails a test)") {
  Context& c = ctx();
  if (!c.instance().validation_enabled()) {
    MESSAGE("validation is off (set GRETA_VK_VALIDATION=1 to run this check)");
    return;
  }
  c.validation_log()->echo = false;
  // A zero-sized buffer breaks VUID-VkBufferCreateInfo-size-00912; the layer reports it and skips the call.
  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = 0;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer buffer = VK_NULL_HANDLE;
  const VkResult result = c.fn().vkCreateBuffer(c.device(), &info, nullptr, &buffer);
  if (result == VK_SUCCESS && buffer != VK_NULL_HANDLE) c.fn().vkDestroyBuffer(c.device(), buffer, nullptr);
  const auto messages = c.validation_log()->messages();
  REQUIRE(!messages.empty());
  CHECK(messages.front().find("validation error") == 0);
  CHECK(messages.front().find("00912") != std::string::npos);
  c.validation_log()->clear();
  c.validation_log()->echo = true;
}

namespace {
// Stands in for a device function table so GRETA_VK_CHECK's message can be checked without a real failure.
struct FakeTable {
  VkResult vkAllocateMemory(int, int) const { return VK_ERROR_OUT_OF_DEVICE_MEMORY; }
  VkResult vkWaitForFences() const { return VK_TIMEOUT; }
};
}  // namespace

TEST_CASE("GRETA_VK_CHECK names the call, the VkResult, the file and the line") {
  FakeTable fn;
  int line = 0;
  const std::string message = error_of([&] {
    line = __LINE__ + 1;
    GRETA_VK_CHECK(fn.vkAllocateMemory(1, 2));
  });
  CHECK(message.find("vkAllocateMemory failed: VK_ERROR_OUT_OF_DEVICE_MEMORY at ") == 0);
  CHECK(message.find("context_test.cpp:" + std::to_string(line)) != std::string::npos);
  // Positive results are not failures.
  CHECK(error_of([&] { GRETA_VK_CHECK(fn.vkWaitForFences()); }).empty());
  CHECK(result_name(VK_ERROR_DEVICE_LOST) == "VK_ERROR_DEVICE_LOST");
  CHECK(result_name(VkResult(-12345)) == "VkResult(-12345)");
}
