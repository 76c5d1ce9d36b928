#include "commands.h"

namespace greta::cli {

// One line per command; keep in the order `greta-vk help` shows them.
extern const Command k_commands[] = {
    {"devices", "list Vulkan devices and their capabilities", cmd_devices},
    {"tokenize", "print the token ids of a text under a model's tokenizer", cmd_tokenize},
    {"info", "describe a GGUF model: architecture, shapes, tensor types, tokenizer, memory", cmd_info},
    {"synth", "write a random-weight GGUF of any supported architecture and shape", cmd_synth},
    {"run", "generate text from a prompt (streamed; --json for one JSON object)", cmd_run},
    {"chat", "chat with a model through its chat template (stdin lines, Ctrl-D ends)", cmd_chat},
    {"logits", "write the logits after every prompt token (float32, n_prompt x n_vocab)", cmd_logits},
    {"bench", "prefill and decode speed, mean ± stddev, like llama-bench", cmd_bench},
    {"serve", "serve OpenAI's API over HTTP: many requests at once, continuous batching", cmd_serve},
    {"tune", "time tiles of the Vulkan prefill matmul kernels for a model; cache the fastest", cmd_tune},
};
extern const int k_command_count = sizeof(k_commands) / sizeof(k_commands[0]);

}  // namespace greta::cli
