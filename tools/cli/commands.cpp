#include "commands.h"

namespace greta::cli {

// One line per command; keep in the order `greta-vk help` shows them.
extern const Command k_commands[] = {
    {"devices", "list Vulkan devices and their capabilities", cmd_devices},
};
extern const int k_command_count = sizeof(k_commands) / sizeof(k_commands[0]);

}  // namespace greta::cli
