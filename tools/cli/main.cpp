// greta-vk: the command-line front end. Dispatches to the subcommands of commands.cpp.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "commands.h"
#include "core/error.h"

namespace greta::cli {
extern const Command k_commands[];
extern const int k_command_count;
}  // namespace greta::cli

using namespace greta::cli;

static void print_help() {
  std::printf("greta-vk %s — Vulkan-compute-first LLM inference\n\nusage: greta-vk COMMAND [options]\n\n",
              GRETA_VERSION);
  for (int i = 0; i < k_command_count; ++i) std::printf("  %-10s %s\n", k_commands[i].name, k_commands[i].summary);
  std::printf("\n  --version  print the version\n  greta-vk COMMAND --help for a command's options\n");
}

int main(int argc, char** argv) {
  // `greta-vk help COMMAND` is `greta-vk COMMAND --help`.
  if (argc == 3 && !std::strcmp(argv[1], "help"))
    for (int i = 0; i < k_command_count; ++i)
      if (!std::strcmp(argv[2], k_commands[i].name)) {
        char help[] = "--help";
        char* args[] = {argv[0], argv[2], help, nullptr};
        return k_commands[i].run(1, args + 2);
      }
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_help();
    return argc < 2 ? 1 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    std::printf("greta-vk %s\n", GRETA_VERSION);
    return 0;
  }
  for (int i = 0; i < k_command_count; ++i) {
    if (std::strcmp(argv[1], k_commands[i].name) != 0) continue;
    try {
      return k_commands[i].run(argc - 2, argv + 2);
    } catch (const greta::Error& e) {
      std::fprintf(stderr, "greta-vk %s: error: %s\n", argv[1], e.what());
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "greta-vk %s: error: out of host memory\n", argv[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "greta-vk %s: internal error: %s\n", argv[1], e.what());
    }
    return 1;
  }
  std::fprintf(stderr, "greta-vk: unknown command '%s' (try greta-vk help)\n", argv[1]);
  return 1;
}
