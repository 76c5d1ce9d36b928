// Pieces shared by the commands that run a model (run, chat, logits, bench): sampling options, prompt input, model
// loading with the backend line and the progress bar, and UTF-8-safe streaming of generated text.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "args.h"
#include "core/utf8_stream.h"
#include "backend_factory.h"
#include "engine/engine.h"
#include "engine/trace.h"
#include "engine/sampler.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

namespace greta::cli {

// Joins option tables (a command's own options and shared ones) into one list for Args.
std::vector<OptionSpec> join_options(std::initializer_list<std::span<const OptionSpec>> tables);

// --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n --frequency-penalty --presence-penalty --seed
std::span<const OptionSpec> sampling_option_specs();
// The parameters those options give (SamplerParams' defaults otherwise). --seed -1 picks a random seed. Throws
// greta::Error for values the sampler rejects or that do not fit its types.
engine::SamplerParams sampling_params_from(const Args& args);

// --kv-type f32|f16 (KV cache element type; the default f16 halves its memory and traffic).
std::span<const OptionSpec> kv_option_specs();
// The KV cache element type those options give.
engine::ElemType kv_type_from(const Args& args);

// The prompt of -p TEXT or -f FILE (exactly one of them). A file is read whole, up to 64 MiB.
std::string read_prompt(const Args& args);
// "1 2 3" or "1,2,3" -> ids; throws greta::Error on anything else.
std::vector<model::TokenId> parse_token_list(std::string_view text);

// A model's file, hyperparameters and tokenizer, read before the engine exists (to size the context from a prompt).
// Opening first (before any backend exists) also makes a missing or broken file the first and only error printed.
struct ModelFiles {
  model::GgufFile file;
  model::ModelConfig config;
  model::Tokenizer tokenizer;
  double open_s = 0;  // seconds spent opening and validating
};
ModelFiles read_model(const std::string& path);

// Creates the backend, prints "backend: ..." to stderr, and loads the model with a progress bar on a terminal; then
// prints the context chosen ("context: 4096 tokens per sequence (trained for 131072), KV cache f16 ...").
struct LoadedModel {
  engine::Engine engine;
  std::string backend_kind;  // "cpu", "vk", "hip"
  std::string device;        // the device's name
  double load_s = 0;         // opening the file + the engine's load (weights onto the backend, first plan)
  engine::SplitBackend* split = nullptr;  // the engine's backend when the model is spread over several, else null
};
// "crossing devices: 1,234 hand-offs, 5.1 MiB, 12.3 ms" for a spread model, else empty.
std::string describe_crossings(const LoadedModel& loaded);
LoadedModel load_model(ModelFiles files, const BackendRequest& backend, const engine::EngineOptions& options);

// --trace FILE (run, bench): a Chrome trace of the run, host steps and per-op device spans (backend profiling on,
// so the run is slightly slower). attach() before the work, write() after it; both do nothing without --trace.
class TraceRequest {
public:
  static constexpr OptionSpec option{"trace", nullptr, true,
                                     "write a Chrome trace (chrome://tracing, ui.perfetto.dev) of the run to FILE: "
                                     "host steps and per-op device times (profiling on)"};
  explicit TraceRequest(const Args& args);
  void attach(engine::Engine& engine);
  void write() const;
  // The trace the engine writes into, or nullptr without --trace (for attaching it to part of a run).
  engine::Trace* sink() { return path_.empty() ? nullptr : &trace_; }

private:
  std::string path_;
  engine::Trace trace_;
};

// Backend profiling (bench --profile): per-op device times accumulate in every plan the engine keeps prepared (one
// per step-size bucket). clear_op_seconds zeroes them; collect_op_seconds sums them per op kind ("rmsnorm",
// ...), the matmuls per weight role, type and shape ("matmul ffn_down q6_K 4096x14336").
void clear_op_seconds(engine::Engine& engine);
std::map<std::string, double> collect_op_seconds(engine::Engine& engine);

// "12.3 ms"-style helpers for summaries.
std::string format_rate(double tokens_per_s);

}  // namespace greta::cli
