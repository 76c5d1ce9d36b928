// The Vulkan backend suites' one device (vk::SharedVkDevice): every backend a test makes through test_backend()
// runs on it and reuses the kernels earlier tests compiled. With a device per backend, compiling the same kernels
// again was most of these suites' time on lavapipe (78 % of the rmsnorm-fusion case, a quarter of the goldens').
// Tests that need a device of their own (validation on, another cache directory, a second device) call
// create_vk_backend themselves.
#pragma once
#include <doctest/doctest.h>

#include <memory>

#include "engine/backend.h"
#include "vk/backend/vk_backend.h"

namespace greta::vk::test {

inline std::shared_ptr<SharedVkDevice> shared_test_device() {
  static const std::shared_ptr<SharedVkDevice> device = open_shared_vk_device();
  return device;
}

// A backend with `options` on the shared device; the options' device, validation and cache_dir must be the defaults.
// Tests force kernels through the experiment switches (GRETA_VK_GEMM_Q8=..., ScopedEnv), as the benches do.
inline std::unique_ptr<engine::Backend> test_backend(VkBackendOptions options = {}) {
  REQUIRE(options.device == -1);
  REQUIRE(!options.validation);
  REQUIRE(options.cache_dir.empty());
  options.shared_device = shared_test_device();
  options.switches = ExperimentSwitches::from_environment();
  return create_vk_backend(options);
}

}  // namespace greta::vk::test
