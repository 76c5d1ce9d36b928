// The engine: a model loaded onto one backend, with its KV cache and execution plans. The CLI (run, chat, logits,
// bench) and the tests drive models only through this API.
//
//   auto engine = Engine::open("model.gguf", std::make_unique<cpu::CpuBackend>());
//   auto prompt = engine.tokenizer().encode("Once upon a time", true);
//   GenerateResult r = engine.generate(prompt, {.max_tokens = 32, .sampling = SamplerParams::greedy()},
//                                      [](TokenId, std::string_view piece) { fputs(..piece..); return true; });
//
// Steps append to the context: prefill(tokens) then decode(token) repeatedly; reset() empties it. Prompts longer
// than max_batch are prefilled in several steps. Plans are built once per step shape and replayed.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/sampler.h"
#include "engine/trace.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

namespace greta::engine {

struct EngineOptions {
  int64_t ctx = 0;          // KV-cache positions; 0: the model's context length, capped by the backend's memory
  int64_t max_batch = 256;  // tokens per prefill step; longer prompts are split into several steps
};

// Wall-clock seconds; rates are tokens per second (0 when nothing was timed).
struct Timings {
  double load_s = 0;         // file open + weights onto the backend + first plan
  int64_t prefill_tokens = 0;
  double prefill_s = 0;
  int64_t decode_tokens = 0;
  double decode_s = 0;
  // While the backend profiles: per step, first op start to last op end on the device, summed (prefill and decode
  // alike). Wall time minus this is the host's share (submission, waits, read-back) plus idle device time.
  double device_s = 0;

  double prefill_tokens_per_s() const { return prefill_s > 0 ? double(prefill_tokens) / prefill_s : 0; }
  double decode_tokens_per_s() const { return decode_s > 0 ? double(decode_tokens) / decode_s : 0; }
  std::string to_json() const;  // {"load_ms":..,"prefill_tokens":..,"prefill_ms":..,"prefill_tokens_per_s":..,...}
};

enum class StopReason { EndOfGeneration, MaxTokens, ContextFull, Callback };
const char* stop_reason_name(StopReason r);  // "eog", "max_tokens", "context_full", "callback"

struct GenerateOptions {
  int64_t max_tokens = 128;       // new tokens at most; < 0: until end of generation or a full context
  SamplerParams sampling;
  bool stop_at_end_of_generation = true;  // EOS/EOT ends generation (the token is not kept, not fed to the model)
};

struct GenerateResult {
  std::vector<TokenId> tokens;  // the generated tokens (not the prompt)
  std::string text;             // their pieces concatenated (raw bytes: may end inside a UTF-8 character)
  StopReason stop = StopReason::MaxTokens;
  Timings timings;              // of this call only (load_s = 0)
  std::string to_json() const;  // {"tokens":[..],"text":"..","stop":"..","timings":{..}}
};

// Called for each generated token with its text piece; return false to stop generating.
using TokenCallback = std::function<bool(TokenId token, std::string_view piece)>;

class Engine {
public:
  // Loads the weights onto the backend and prepares the decode plan. Throws greta::Error on a bad model, a context
  // that does not fit the backend's memory, or a backend failure.
  Engine(model::GgufFile file, model::ModelConfig config, model::Tokenizer tokenizer, std::unique_ptr<Backend> backend,
         const EngineOptions& options = {});
  // Opens the file and reads its config and tokenizer, then as above (load_s includes opening the file).
  static Engine open(const std::string& path, std::unique_ptr<Backend> backend, const EngineOptions& options = {});

  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  const model::ModelConfig& config() const { return config_; }
  const model::Tokenizer& tokenizer() const { return tokenizer_; }
  const model::GgufFile& file() const { return file_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() { return *backend_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  int64_t context_size() const { return ctx_; }
  int64_t n_past() const { return int64_t(history_.size()); }    // positions filled in the KV cache
  const std::vector<TokenId>& history() const { return history_; }  // the tokens in the context

  // Appends tokens to the context and returns the logits after the last one (vocab floats, valid until the next
  // call). Throws greta::Error for an empty list, a token outside the vocabulary, or when the context would
  // overflow ("context full": nothing is appended then).
  std::span<const float> prefill(std::span<const TokenId> tokens);
  // The same, returning the logits after every token: [tokens.size(), vocab] row-major.
  std::vector<float> prefill_all_logits(std::span<const TokenId> tokens);
  // One token: prefill({token}), timed as decoding.
  std::span<const float> decode(TokenId token);
  // Empties the context (the KV cache contents are simply overwritten by the next steps).
  void reset();

  // Prefills `prompt` (may be empty when the context already ends with the last logits, i.e. after a previous
  // prefill/decode), then samples up to max_tokens tokens, feeding each back. The prompt tokens are recorded in
  // the sampler's penalty history.
  GenerateResult generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                          const TokenCallback& on_token = {});
  GenerateResult generate(std::span<const TokenId> prompt, Sampler& sampler, int64_t max_tokens,
                          bool stop_at_end_of_generation = true, const TokenCallback& on_token = {});

  // Timings since construction (or reset_timings()).
  const Timings& timings() const { return timings_; }
  void reset_timings();

  // Records each step (host spans) and, while the backend profiles, each op (device spans) into `trace`; nullptr
  // stops. The trace must outlive the engine's use of it.
  void set_trace(Trace* trace) { trace_ = trace; }

  // The plan for a step shape (built and prepared on first use); for tools that inspect or profile plans.
  PreparedPlan& plan_for(int64_t n_tokens, bool all_logits);

  // Bytes of KV cache per context position (f32 K and V, every layer).
  static uint64_t kv_bytes_per_position(const model::ModelConfig& config);

private:
  void check_tokens(std::span<const TokenId> tokens) const;
  // Runs the tokens through the model in max_batch steps; the logits of the last token (or every token when
  // all_logits) are copied into `out`.
  void run_steps(std::span<const TokenId> tokens, bool all_logits, std::vector<float>& out);
  void record_step(PreparedPlan& plan, int64_t n_tokens, Trace::Clock::time_point start, Trace::Clock::time_point end,
                   bool read_logits);

  model::GgufFile file_;
  model::ModelConfig config_;
  model::Tokenizer tokenizer_;
  std::unique_ptr<Backend> backend_;
  ModelWeights weights_;
  EngineOptions options_;
  int64_t ctx_ = 0;
  std::vector<TokenId> history_;
  std::vector<float> last_logits_;  // [vocab]
  bool have_logits_ = false;        // last_logits_ belong to the current context's last token
  std::map<std::pair<int64_t, bool>, std::unique_ptr<PreparedPlan>> plans_;  // by (n_tokens, all_logits)
  Timings timings_;
  Trace* trace_ = nullptr;
};

// JSON string literal for arbitrary bytes: escapes quotes, backslashes and control characters, and replaces
// invalid UTF-8 with U+FFFD so the result is always valid JSON.
std::string json_quote(std::string_view bytes);

}  // namespace greta::engine
