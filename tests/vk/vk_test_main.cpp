// The Vulkan test suites' main: doctest's, with one Vulkan instance held for the whole run.
// Each backend and context a test makes creates and destroys its own instance, and when the last instance of a process
// goes, the loader unloads the driver. NVIDIA's (580, H200) does not come back after about 30 such reloads in one
// process: from the 31st instance on, "no Vulkan device found" (context_test.cpp makes 40 in a row). An instance that
// lives as long as the run keeps the driver loaded. Where none can be made (no loader, no driver) the tests run
// without it and report that themselves.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <optional>

#include "core/error.h"
#include "vk/instance.h"

int main(int argc, char** argv) {
  std::optional<greta::vk::Instance> driver_keeper;
  try {
    driver_keeper.emplace(greta::vk::InstanceOptions{});
  } catch (const greta::Error&) {
  }
  doctest::Context context(argc, argv);
  return context.run();
}
