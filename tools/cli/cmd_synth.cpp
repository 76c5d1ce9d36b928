// greta-vk synth OUT.gguf ...: writes a random-weight model of any supported architecture and shape (model/synth.h).
#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "interrupt.h"
#include "model/synth.h"

namespace greta::cli {

namespace {
constexpr OptionSpec k_synth_options[] = {
    {"arch", nullptr, true, "llama | qwen2 | qwen3 | qwen3moe | gemma3 | phi3 | gpt-oss (default llama)"},
    {"dim", nullptr, true, "embedding width (required)"},
    {"layers", nullptr, true, "number of blocks (required)"},
    {"heads", nullptr, true, "attention heads (required)"},
    {"kv-heads", nullptr, true, "KV heads (default: --heads)"},
    {"head-dim", nullptr, true, "head dimension (default: dim / heads)"},
    {"ffn", nullptr, true, "feed-forward width (required)"},
    {"vocab-from", nullptr, true, "GGUF (or .gguf.xz) whose tokenizer is copied (required)"},
    {"type", nullptr, true, "weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m iq4_nl iq4_xs mxfp4"},
    {"seed", nullptr, true, "random seed (default 1)"},
    {"ctx", nullptr, true, "context_length written to the file (default 4096)"},
    {"rope-base", nullptr, true, "rope.freq_base (default: llama 10000, qwen 1e6)"},
    {"tied", nullptr, false, "tied embeddings: no output.weight"},
    {"name", nullptr, true, "general.name"},
    {"threads", "j", true, "generator threads (default: all)"},
    {"experts", nullptr, true, "qwen3moe, gpt-oss: experts per layer (default 8)"},
    {"experts-used", nullptr, true, "qwen3moe, gpt-oss: experts per token (default 2)"},
    {"expert-ffn", nullptr, true, "qwen3moe, gpt-oss: FFN width of each expert (default: --ffn)"},
    {"sliding-window", nullptr, true, "gemma3, gpt-oss: attention window of the sliding-window layers"},
    {"repeat-chunk", nullptr, false, "for speed benchmarks: quantize each tensor's first 4 MiB and repeat it (periodic values, seconds not minutes)"},
    {"quiet", "q", false, "no progress output"},
    {"help", "h", false, "show this help"},
};

int64_t required_int(const Args& args, const char* name) {
  if (!args.has(name)) fail("missing --", name);
  return args.get_int(name, 0);
}
}  // namespace

int cmd_synth(int argc, char** argv) {
  Args args(argc, argv, k_synth_options);
  const char* usage =
      "greta-vk synth OUT.gguf --arch llama|qwen2|qwen3|qwen3moe|gemma3|phi3|gpt-oss --dim D --layers L --heads H [--kv-heads KV] --ffn F "
      "--vocab-from FILE.gguf --type T [--seed S] [--ctx C] [--head-dim HD] [--tied] [--experts E --experts-used K "
      "--expert-ffn F] [--sliding-window W]";
  if (args.has("help")) {
    std::printf("usage: %s\n%s", usage, usage_options(k_synth_options).c_str());
    return 0;
  }
  args.expect_positional(1, 1, usage);
  model::SynthOptions o;
  o.arch = args.get("arch", "llama");
  o.dim = required_int(args, "dim");
  o.n_layers = required_int(args, "layers");
  o.n_heads = required_int(args, "heads");
  o.n_kv_heads = args.get_int("kv-heads", 0);
  o.head_dim = args.get_int("head-dim", 0);
  o.ffn_dim = required_int(args, "ffn");
  o.context_length = args.get_int("ctx", 4096);
  o.rope_base = static_cast<float>(args.get_double("rope-base", 0));
  o.tied_embeddings = args.has("tied");
  o.n_experts = args.get_int("experts", 8);
  o.n_experts_used = args.get_int("experts-used", 2);
  o.expert_ffn_dim = args.get_int("expert-ffn", 0);
  o.sliding_window = args.get_int("sliding-window", 0);
  if (!args.has("vocab-from")) fail("missing --vocab-from FILE.gguf (the tokenizer to copy)");
  o.vocab_from = args.get("vocab-from");
  if (!args.has("type")) fail("missing --type (e.g. f16, q8_0, q4_k_m)");
  model::parse_synth_type(args.get("type"), o);
  int64_t seed = args.get_int("seed", 1);
  o.seed = static_cast<uint64_t>(seed);
  o.name = args.get("name");
  o.threads = static_cast<int>(args.get_int("threads", 0));
  o.repeat_first_chunk = args.has("repeat-chunk");
  const bool quiet = args.has("quiet");
  int last_percent = -1;
  if (!quiet)
    o.progress = [&](uint64_t done, uint64_t total) {
      int percent = total ? int(done * 100 / total) : 100;
      if (percent != last_percent) std::fprintf(stderr, "\rwriting %3d%%", percent);
      last_percent = percent;
    };

  const auto& out = args.positional()[0];
  // Ctrl-C or SIGTERM stops the writers at the next row; the partial file (OUT.part) is removed as the error unwinds.
  InterruptHandlers interrupts;
  o.should_stop = [] { return interrupt_requested(); };
  auto t0 = std::chrono::steady_clock::now();
  model::SynthSummary s;
  try {
    s = model::synthesize_model(out, o);
  } catch (const greta::Error&) {
    if (last_percent >= 0) std::fputc('\n', stderr);
    const int signal = interrupts.take();
    if (signal == 0) throw;
    std::fprintf(stderr, "greta-vk synth: interrupted (%s): %s not written, its partial file %s.part removed\n",
                 signal == SIGINT ? "SIGINT" : "SIGTERM", out.c_str(), out.c_str());
    return interrupted_exit_code(signal);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) std::fprintf(stderr, "\r");
  std::printf("wrote %s: %s %s, %" PRIu64 " parameters, vocab %" PRId64 ", %s in %.1f s (%s/s)\n", out.c_str(),
              o.arch.c_str(), o.q4_k_m_mix ? "q4_k_m" : model::type_name(o.type), s.n_params, s.vocab_size,
              format_bytes(double(s.file_bytes)).c_str(), secs, format_bytes(s.file_bytes / std::max(secs, 1e-9)).c_str());
  if (s.n_fallback_tensors)
    std::printf("note: %d matrices have rows that do not split into %s blocks: stored as q8_0 or f16\n",
                s.n_fallback_tensors, model::type_name(o.type));
  return 0;
}

}  // namespace greta::cli
