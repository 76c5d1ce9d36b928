// The engine: a model loaded onto one backend (weights, tokenizer, config: shared by everything), the paged KV cache
// (kv_cache.h), the sequences that hold its pages, and the steps that run forward passes over batches of sequences.
// The CLI (run, chat, logits, bench), the batch runner (batch.h) and the tests drive models only through this API;
// docs/engine.md explains the design.
//
// Many sequences:
//   SeqId a = engine.new_sequence(), b = engine.new_sequence();
//   const StepLogits& out = engine.step({{a, prompt_a}, {b, prompt_b}});   // one or more forward passes
//   out.row(0), out.row(1): the logits after each entry's last token
//   engine.step({{a, {&next_a, 1}}, {b, {&next_b, 1}}});                    // decode both in one pass
//   SeqId c = engine.fork_sequence(a);   // shares a's full pages; release_sequence() frees what nobody else holds
//
// One conversation (the CLI's run/chat, most tests): prefill(tokens), decode(token), generate(...), reset() act on a
// default sequence.
//
// Steps run in plans made per bucket of step sizes (powers of two up to max_batch), at most a dozen prepared at a
// time; padding tokens fill a bucket and write only the sink page.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/sampler.h"
#include "engine/trace.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

namespace greta::engine {

struct EngineOptions {
  int64_t ctx = 0;          // positions per sequence at most; 0: min(the model's trained context, 4096), capped by
                            // the KV budget
  int64_t max_batch = 512;  // tokens per step; longer work is split into several steps
  int64_t max_seqs = 1;     // sequences per step at most (more are run in further steps)
  uint64_t kv_budget = 0;   // bytes of KV cache at most (the page pool grows to it as pages are used); 0: half of
                            // the backend's memory left after the weights
  ElemType kv_type = ElemType::F16;  // F32, F16 or Q8_0 (rows of a multiple of 32 elements)
};

// Wall-clock seconds; rates are tokens per second (0 when nothing was timed).
struct Timings {
  double load_s = 0;         // file open + weights onto the backend + first plan
  int64_t prefill_tokens = 0;
  double prefill_s = 0;
  int64_t decode_tokens = 0;
  double decode_s = 0;
  // Per step, first op start to last op end on the device, summed (prefill and decode alike): while the backend
  // profiles (its dispatches then run one at a time), else where it measures a run cheaply
  // (PreparedPlan::take_run_device_seconds; 0 where it does not). Wall time minus this is the host's share
  // (submission, waits, read-back) plus idle device time.
  double device_s = 0;

  double prefill_tokens_per_s() const { return prefill_s > 0 ? double(prefill_tokens) / prefill_s : 0; }
  double decode_tokens_per_s() const { return decode_s > 0 ? double(decode_tokens) / decode_s : 0; }
};

enum class StopReason { EndOfGeneration, MaxTokens, ContextFull, Callback, StopString };
// "eog", "max_tokens", "context_full", "callback", "stop" (a stop string)
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int64_t max_tokens = 128;       // new tokens at most; < 0: until end of generation or a full context
  SamplerParams sampling;
  bool stop_at_end_of_generation = true;  // EOS/EOT ends generation (the token is not kept, not fed to the model)
  std::vector<std::string> stop = {};     // stop strings (engine/stop_strings.h): matched across tokens, not emitted
};

struct GenerateResult {
  std::vector<TokenId> tokens;  // the generated tokens (not the prompt)
  std::string text;             // their pieces concatenated (raw bytes: may end inside a UTF-8 character)
  StopReason stop = StopReason::MaxTokens;
  Timings timings;              // of this call only (load_s = 0)
};

// Called for each generated token with the text it releases (its piece; with stop strings, what can no longer start
// one: possibly empty, possibly earlier pieces held back); return false to stop generating.
using TokenCallback = std::function<bool(TokenId token, std::string_view piece)>;

// What a step entry wants back.
enum class LogitsWanted { None, Last, All };

// One entry of a step: tokens appended to a sequence (a sequence appears at most once per step).
struct StepEntry {
  SeqId seq = -1;
  std::span<const TokenId> tokens;
  LogitsWanted logits = LogitsWanted::Last;
};

// The logits a step returned, valid until the next step: row(i) for entry i (vocab floats after its last token; empty
// for entries that wanted none); all_rows(i): for LogitsWanted::All, [tokens, vocab] over every token the step
// processed for the entry (its own, after any a fork left to recompute).
class StepLogits {
public:
  std::span<const float> row(size_t entry) const;
  std::span<const float> all_rows(size_t entry) const;

private:
  friend class Engine;
  int64_t vocab_ = 0;
  std::vector<float> last_;                  // [entries, vocab]: rows copied out of the backend
  std::vector<std::span<const float>> views_;  // per entry: its row in the backend's memory, where it lends one
  std::vector<std::vector<float>> all_;      // per entry, LogitsWanted::All only
  std::vector<uint8_t> has_last_;
};

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
  int64_t context_size() const { return ctx_; }  // positions per sequence
  const EngineOptions& options() const { return options_; }
  const KvCache& kv_cache() const { return kv_; }
  // The sliding-window layers' own pool (models with such layers; null otherwise).
  const KvCache* swa_kv_cache() const { return kv_swa_ ? &*kv_swa_ : nullptr; }
  uint64_t kv_bytes_per_page() const;

  // --- sequences ----------------------------------------------------------------------------------------------
  SeqId new_sequence();
  // A new sequence with src's history, sharing its full KV pages; the tokens past them (fewer than a page, and
  // always at least the last one, so the fork's next step returns the logits after src's history) are recomputed
  // by the fork's next step.
  SeqId fork_sequence(SeqId src);
  // A new sequence whose history is `prompt`'s longest prefix held by a live sequence (whole pages, short of the
  // prompt's last token): those pages are shared, not recomputed. Returns the sequence and the tokens reused.
  std::pair<SeqId, int64_t> new_sequence_with_prefix(std::span<const TokenId> prompt);
  void release_sequence(SeqId seq);
  const std::vector<TokenId>& sequence_tokens(SeqId seq) const;  // its history (tokens appended so far)
  // Shortens a sequence's history to n tokens (the KV cache forgets the rest).
  void truncate_sequence(SeqId seq, int64_t n);
  // Positions the KV budget can still give (beyond what sequences hold).
  int64_t kv_positions_available() const;
  // Grows the page pool now so that `positions` more positions fit without re-preparing plans mid-run (benches).
  void reserve_kv(int64_t positions);

  // Runs the entries' tokens through the model in as few steps as max_batch and max_seqs allow (tokens a fork left
  // to recompute go first). Throws greta::Error, with nothing appended, for a token outside the vocabulary, a
  // sequence past its context ("context full") or KV pages beyond the budget ("KV cache full").
  const StepLogits& step(std::span<const StepEntry> entries);
  const StepLogits& step(std::initializer_list<StepEntry> entries) { return step(std::span(entries.begin(), entries.size())); }

  // --- one conversation: the default sequence ----------------------------------------------------------------
  int64_t n_past() const;                        // positions filled in its context
  const std::vector<TokenId>& history() const;   // the tokens in its context

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
                          bool stop_at_end_of_generation = true, const TokenCallback& on_token = {},
                          std::vector<std::string> stop = {});

  // Timings since construction (or reset_timings()).
  const Timings& timings() const { return timings_; }
  void reset_timings();

  // Records each step (host spans) and, while the backend profiles, each op (device spans) into `trace`; nullptr
  // stops. The trace must outlive the engine's use of it.
  void set_trace(Trace* trace) { trace_ = trace; }

  // The plan for steps of a bucket (n_tokens rounded up to one; built and prepared on first use); for tools that
  // inspect or profile plans.
  // decode: every token of the step is its sequence's only one (PlanShape::decode, a kernel-choice hint).
  PreparedPlan& plan_for(int64_t n_tokens, bool all_logits, bool decode = false);
  // Every plan prepared now (profiles sum their per-op times).
  std::vector<PreparedPlan*> prepared_plans();
  // The step-size bucket n tokens run in: the next power of two, at most max_batch.
  int64_t bucket_for(int64_t n_tokens) const;

  // Bytes of KV cache per context position (K and V, every layer) with elements of `kv_type`.
  static uint64_t kv_bytes_per_position(const model::ModelConfig& config, ElemType kv_type = ElemType::F32);
  // The context per sequence when EngineOptions::ctx is 0, before the memory check: the trained length, at most
  // 4096 (llama.cpp's default too).
  static int64_t default_context(const model::ModelConfig& config);

private:
  struct Sequence {  // the engine's side of a sequence (live while the KV cache holds it, under the same id)
    std::vector<TokenId> tokens;  // history: tokens[0 .. kv length) are in the cache, the rest wait for a step
    uint64_t step_stamp = 0;      // the last step that named it (a step names a sequence once)
  };
  // One sequence's part of a pending forward pass.
  struct Run {
    size_t entry;
    SeqId seq;
    int64_t first, count;  // positions [first, first + count) of the sequence's history
  };
  Sequence& seq_at(SeqId seq);
  const Sequence& seq_at(SeqId seq) const;
  Sequence& adopt(SeqId id);  // an empty Sequence for a sequence the KV cache just created
  SeqId default_sequence();
  // Runs `runs` (at most max_seqs, at most max_batch tokens) as one forward pass and copies the logits out.
  // One pass of a step; `more_passes`: another pass of the step follows this one.
  void run_pass(std::span<const Run> runs, std::span<const StepEntry> entries, bool all_logits, bool more_passes);
  // Adds a pass's wall time to decode (one token per sequence: `sequences` tokens) or prefill (`tokens`).
  void count_time(bool decode, int64_t sequences, int64_t tokens, double seconds);
  // Whether a sequence's sliding-window pool still holds the window before `positions` (always without that pool).
  bool swa_prefix_usable(SeqId seq, int64_t positions) const;
  SeqId fork_kv(SeqId src, int64_t positions);  // a fork in every pool
  void record_step(PreparedPlan& plan, int64_t n_tokens, Trace::Clock::time_point start, Trace::Clock::time_point end,
                   bool read_logits);

  model::GgufFile file_;
  model::ModelConfig config_;
  model::Tokenizer tokenizer_;
  std::unique_ptr<Backend> backend_;
  ModelWeights weights_;
  EngineOptions options_;
  int64_t ctx_ = 0;
  KvCache kv_;
  // The sliding-window layers' pool, for models with such layers (gemma3, gpt-oss): the same sequences (ids kept
  // equal by doing every create / fork / release / truncate on both), each giving up its pages before its window
  // after every step, so it holds about a window of pages per sequence. Empty for other models.
  std::optional<KvCache> kv_swa_;
  int64_t prepared_pages_ = 0, prepared_swa_pages_ = 0;  // the pool sizes the prepared plans were made for
  std::vector<Sequence> seqs_;      // by SeqId (the KV cache's ids)
  SeqId default_seq_ = -1;
  // After a one-entry step of the default sequence (prefill, decode): its logits row into last_logits_.
  void keep_default_logits();
  std::vector<float> last_logits_;  // [vocab]: the default sequence's
  bool have_logits_ = false;        // last_logits_ belong to the default sequence's last token
  StepLogits step_logits_;
  StepArrays step_arrays_;          // reused by every pass (no per-step allocation once sized)
  std::vector<Run> runs_, pass_;
  uint64_t step_stamp_ = 0;
  // How a pass's time is counted: Auto: decode when every run is one token, else prefill; prefill()/decode() say.
  enum class TimingClass { Auto, Prefill, Decode };
  TimingClass timing_ = TimingClass::Auto;
  bool last_pass_decode_ = false;  // the kind of the step's last pass (count_time)
  struct TimingScope {
    TimingClass& slot;
    TimingScope(TimingClass& s, TimingClass c) : slot(s) { slot = c; }
    ~TimingScope() { slot = TimingClass::Auto; }
  };
  struct CachedPlan {
    std::unique_ptr<PreparedPlan> plan;
    uint64_t last_use = 0;
  };
  using PlanKey = std::tuple<int64_t, bool, bool>;  // bucket, all_logits, decode
  std::map<PlanKey, CachedPlan> plans_;
  uint64_t plan_clock_ = 0;
  Timings timings_;
  Trace* trace_ = nullptr;
};

}  // namespace greta::engine
