#include "vk/backend/experiment_switches.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace greta::vk {

const char* ExperimentSwitches::get(std::string_view name) const {
  GRETA_CHECK(std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames), "unknown switch ", name);
  if (!environment_) return nullptr;
  const char* v = std::getenv(std::string(name).c_str());
  return v && *v ? v : nullptr;
}

}  // namespace greta::vk
