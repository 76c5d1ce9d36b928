// greta-vk: the command-line front end. Dispatches to the subcommands of commands.cpp.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <new>
#include <vector>

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
    // llama.cpp's spelling `-m MODEL` / `--model MODEL` for the commands whose first argument is the model: the model
    // becomes that first argument (info keeps -m for --metadata).
    std::vector<char*> args(argv + 2, argv + argc);
    static constexpr const char* k_model_first[] = {"run", "chat", "logits", "bench", "tune", "tokenize"};
    if (std::any_of(std::begin(k_model_first), std::end(k_model_first),
                    [&](const char* c) { return !std::strcmp(c, argv[1]); }))
      for (size_t a = 0; a < args.size(); ++a) {
        const bool spaced = (!std::strcmp(args[a], "-m") || !std::strcmp(args[a], "--model")) && a + 1 < args.size();
        if (spaced) {
          char* model = args[a + 1];
          args.erase(args.begin() + ptrdiff_t(a), args.begin() + ptrdiff_t(a) + 2);
          args.insert(args.begin(), model);
          break;
        }
        if (!std::strncmp(args[a], "--model=", 8)) {
          char* model = args[a] + 8;
          args.erase(args.begin() + ptrdiff_t(a));
          args.insert(args.begin(), model);
          break;
        }
      }
    args.push_back(nullptr);
    try {
      return k_commands[i].run(int(args.size()) - 1, args.data());
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
