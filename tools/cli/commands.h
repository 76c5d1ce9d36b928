// The greta-vk subcommands. Each lives in its own cmd_*.cpp and is listed once in commands.cpp.
// A command gets the arguments after its name and returns the process exit code; it throws greta::Error for any
// user-facing failure (main prints the one-line message and exits 1).
#pragma once

namespace greta::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

int cmd_devices(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_tune(int argc, char** argv);
int cmd_serve(int argc, char** argv);

}  // namespace greta::cli
