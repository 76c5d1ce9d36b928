#include "commands.h"
#include "core/error.h"
namespace greta::cli {
int cmd_devices(int, char**) { fail("Vulkan runtime not built yet"); }
}  // namespace greta::cli
