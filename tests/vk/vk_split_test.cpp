// Layer splits with Vulkan devices (engine/split_backend.h): the goldens over the four splits of
// tests/engine/split_goldens.h (blocks on the CPU, two logical Vulkan devices of one GPU), the validation layer on
// every device, and a device too small for its part.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/split_backend.h"
#include "engine/split_goldens.h"
#include "vk/backend/vk_backend.h"
#include "vk/instance.h"
#include "vk_shared_device.h"

using namespace greta;
using namespace greta::engine;
using test::Split;

namespace {

// Logical device 0 is the suite's shared device (its kernels compiled once for the suite), device 1 a device of
// its own: two VkDevices, as two GPUs would be.
std::unique_ptr<engine::Backend> split_part(int device) {
  return device == 0 ? vk::test::test_backend() : vk::create_vk_backend();
}

std::unique_ptr<SplitBackend> make_split(const std::string& path, Split split) {
  return test::make_split(path, split, split_part);
}

}  // namespace

TEST_CASE("vk layer split: every golden passes with blocks on the CPU or on a second logical device") {
  test::check_goldens_over_splits("vk", split_part);
}

TEST_CASE("vk layer split: golden prompts as concurrent sequences beside six others") {
  test::check_batched_goldens_over_splits("vk", split_part);
}

TEST_CASE("vk layer split: a prompt of many passes runs pipelined over two devices, logits unchanged") {
  test::check_pipelined_passes(split_part);
}

// Two Vulkan GPUs (`--devices 0,1`; CI's lavapipe is one device, and the case says it did not run): every golden over
// both, even and 1:3. Each GPU is opened once for the case, its kernels compiled once: a backend per golden run on a
// device of its own would pass the hundred or so devices NVIDIA's driver lets one process create.
TEST_CASE("vk layer split over two GPUs: every golden, even and --tensor-split 1,3") {
  std::vector<int> gpus;
  for (const vk::DeviceInfo& d : vk::list_devices())
    if (d.usable && d.type != VK_PHYSICAL_DEVICE_TYPE_CPU) gpus.push_back(int(d.index));
  if (!test::two_gpus_or_skip(gpus.size())) return;
  const std::shared_ptr<vk::SharedVkDevice> devices[2] = {vk::open_shared_vk_device(gpus[0]),
                                                          vk::open_shared_vk_device(gpus[1])};
  MESSAGE("GPUs ", gpus[0], " and ", gpus[1]);
  test::check_goldens_over_two_gpus("vk", [&](int device) {
    vk::VkBackendOptions options;
    options.shared_device = devices[device];
    return vk::create_vk_backend(options);
  });
}

// Both kinds of split prefill and decode with the validation layer silent on every Vulkan device (the suite's
// validation run sets GRETA_VK_VALIDATION=1).
TEST_CASE("vk layer split: the validation layer stays silent on every device") {
  const std::string path = test::shared_path("models/stories260K-q4_0.gguf");
  for (Split split : test::kSplits) {
    CAPTURE(test::split_name(split));
    auto backend = make_split(path, split);
    SplitBackend* s = backend.get();
    Engine e = Engine::open(path, std::move(backend), EngineOptions{.ctx = 64});
    e.prefill(std::vector<TokenId>{1, 15, 42, 7, 300});
    e.decode(9);
    CHECK(s->crossings().copies >= 2);  // at least one hand-off in each of the two steps
    for (size_t i = 0; i < s->backend_count(); ++i)
      if (s->backend(i).name().rfind("vulkan", 0) == 0) CHECK(vk::validation_messages(s->backend(i)).empty());
  }
}

// A device that cannot hold its part fails at load with one line naming it and the sizes.
TEST_CASE("vk layer split: a device memory limit too small for the blocks is a clear error") {
  const std::string path = test::shared_path("models/stories260K-q8_0.gguf");
  vk::VkBackendOptions options;
  options.device_memory_limit = 64 << 10;
  auto vk = vk::create_vk_backend(options);
  CHECK(vk->memory_capacity() == uint64_t(64 << 10));
  CHECK_THROWS_WITH_AS(Engine::open(path, std::move(vk)), doctest::Contains("64.00 KiB"), Error);
}
