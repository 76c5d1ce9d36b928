#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"

namespace greta::engine {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Plans kept prepared at once: the decode plan plus a few prefill shapes (chat turns differ in length).
constexpr size_t kMaxCachedPlans = 8;
// Positions are int32 on every backend.
constexpr int64_t kMaxContext = int64_t(1) << 30;

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

uint64_t Engine::kv_bytes_per_position(const model::ModelConfig& c) {
  return uint64_t(c.n_layers) * uint64_t(c.n_kv_heads) * uint64_t(c.head_dim + c.head_dim_v) * sizeof(float);
}

Engine::Engine(model::GgufFile file, model::ModelConfig config, model::Tokenizer tokenizer,
               std::unique_ptr<Backend> backend, const EngineOptions& options)
    : file_(std::move(file)),
      config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      backend_(std::move(backend)),
      options_(options) {
  const auto start = Clock::now();
  GRETA_CHECK(backend_ != nullptr);
  if (options_.max_batch <= 0) fail("max batch ", options_.max_batch, " must be at least 1");
  if (options_.ctx < 0) fail("context size ", options_.ctx, " must be positive (0: the model's)");
  weights_ = map_weights(file_, config_);
  if (tokenizer_.vocab_size() > config_.vocab_size)
    fail(file_.path(), ": the tokenizer has ", tokenizer_.vocab_size(), " tokens, the model only ", config_.vocab_size,
         " embedding rows");

  // Context: asked for, or the model's training context capped so the KV cache takes at most half of the memory
  // the backend has left after the weights.
  const uint64_t per_pos = kv_bytes_per_position(config_);
  const uint64_t capacity = backend_->memory_capacity(), weight_bytes = weights_.total_bytes();
  const uint64_t free_bytes = capacity > weight_bytes ? capacity - weight_bytes : 0;
  if (options_.ctx > 0) {
    ctx_ = options_.ctx;
    if (ctx_ > kMaxContext) fail("context size ", ctx_, " exceeds the maximum of ", kMaxContext);
    if (uint64_t(ctx_) * per_pos > free_bytes)
      fail("a context of ", ctx_, " positions needs ", format_bytes(double(uint64_t(ctx_) * per_pos)),
           " of KV cache; ", backend_->name(), " has ", format_bytes(double(free_bytes)), " left after the weights");
  } else {
    ctx_ = config_.context_length > 0 ? std::min(config_.context_length, kMaxContext) : 4096;
    const int64_t fits = int64_t(std::min<uint64_t>(free_bytes / 2 / per_pos, uint64_t(kMaxContext)));
    if (fits < 1)
      fail("no memory left for a KV cache on ", backend_->name(), " (", format_bytes(double(capacity)),
           " in all, weights ", format_bytes(double(weight_bytes)), ")");
    ctx_ = std::min(ctx_, fits);
  }
  options_.max_batch = std::min(options_.max_batch, ctx_);

  backend_->load_weights(weights_.table);
  last_logits_.assign(size_t(config_.vocab_size), 0.f);
  plan_for(1, false);  // the decode plan; allocates the KV cache now so memory errors show at load
  timings_.load_s = seconds_since(start);
}

Engine Engine::open(const std::string& path, std::unique_ptr<Backend> backend, const EngineOptions& options) {
  const auto start = Clock::now();
  model::GgufFile file = model::GgufFile::open(path);
  model::ModelConfig config = model::ModelConfig::from_gguf(file);
  model::Tokenizer tokenizer = model::Tokenizer::from_gguf(file);
  Engine engine(std::move(file), std::move(config), std::move(tokenizer), std::move(backend), options);
  engine.timings_.load_s = seconds_since(start);
  return engine;
}

Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

PreparedPlan& Engine::plan_for(int64_t n_tokens, bool all_logits) {
  const auto key = std::make_pair(n_tokens, all_logits);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  if (plans_.size() >= kMaxCachedPlans) {  // drop one prefill plan (never the decode plan)
    for (auto victim = plans_.begin(); victim != plans_.end(); ++victim)
      if (victim->first != std::make_pair(int64_t(1), false)) {
        plans_.erase(victim);
        break;
      }
  }
  const Plan plan = build_plan(config_, weights_, PlanShape{n_tokens, ctx_, all_logits});
  return *(plans_[key] = backend_->prepare(plan));
}

void Engine::check_tokens(std::span<const TokenId> tokens) const {
  if (tokens.empty()) fail("no tokens to process");
  for (TokenId t : tokens)
    if (t < 0 || t >= config_.vocab_size) fail("token id ", t, " is outside the vocabulary (", config_.vocab_size, ")");
  if (n_past() + int64_t(tokens.size()) > ctx_)
    fail("context full: ", n_past(), " + ", tokens.size(), " tokens exceed the context of ", ctx_,
         " positions (reset, or use a larger --ctx)");
}

void Engine::run_steps(std::span<const TokenId> tokens, bool all_logits, std::vector<float>& out) {
  check_tokens(tokens);
  const int64_t vocab = config_.vocab_size, total = int64_t(tokens.size());
  out.resize(size_t(all_logits ? total * vocab : vocab));
  have_logits_ = false;
  for (int64_t done = 0; done < total;) {
    const int64_t n = std::min(options_.max_batch, total - done);
    PreparedPlan& plan = plan_for(n, all_logits);
    const auto chunk = tokens.subspan(size_t(done), size_t(n));
    const auto step_start = Clock::now();
    backend_->execute(plan, StepInput{chunk, n_past()});
    const auto step_end = Clock::now();
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    const int64_t rows = plan.plan().n_logit_rows;
    if (all_logits)
      backend_->read(plan, plan.plan().logits, 0, std::span<float>(out).subspan(size_t(done * vocab), size_t(rows * vocab)));
    else if (done + n == total)
      backend_->read(plan, plan.plan().logits, (rows - 1) * vocab, std::span<float>(out));
    if (trace_) record_step(plan, n, step_start, step_end, all_logits || done + n == total);
    if (!plan.op_spans().empty()) {
      int64_t first = plan.op_spans().front().start_ns, last = plan.op_spans().front().end_ns;
      for (const PreparedPlan::OpSpan& s : plan.op_spans()) {
        first = std::min(first, s.start_ns);
        last = std::max(last, s.end_ns);
      }
      timings_.device_s += double(last - first) * 1e-9;
    }
    plan.op_spans().clear();
    done += n;
  }
  std::copy(out.end() - vocab, out.end(), last_logits_.begin());
  have_logits_ = true;
}

void Engine::record_step(PreparedPlan& plan, int64_t n_tokens, Clock::time_point start, Clock::time_point end,
                         bool read_logits) {
  trace_->host_span(cat("step: ", n_tokens, n_tokens == 1 ? " token" : " tokens"), start, end);
  if (read_logits) trace_->host_span("read logits", end, Clock::now());
  for (const PreparedPlan::OpSpan& s : plan.op_spans()) {
    const PlanOp& op = plan.plan().ops[s.op];
    trace_->span(Trace::Track::device, op.label, op_kind_name(op.kind()), s.start_ns, s.end_ns);
  }
}

std::span<const float> Engine::prefill(std::span<const TokenId> tokens) {
  const auto start = Clock::now();
  run_steps(tokens, false, last_logits_);
  timings_.prefill_s += seconds_since(start);
  timings_.prefill_tokens += int64_t(tokens.size());
  return last_logits_;
}

std::vector<float> Engine::prefill_all_logits(std::span<const TokenId> tokens) {
  const auto start = Clock::now();
  std::vector<float> all;
  run_steps(tokens, true, all);
  timings_.prefill_s += seconds_since(start);
  timings_.prefill_tokens += int64_t(tokens.size());
  return all;
}

std::span<const float> Engine::decode(TokenId token) {
  const auto start = Clock::now();
  run_steps(std::span<const TokenId>(&token, 1), false, last_logits_);
  timings_.decode_s += seconds_since(start);
  timings_.decode_tokens += 1;
  return last_logits_;
}

void Engine::reset() {
  history_.clear();
  have_logits_ = false;
}

void Engine::reset_timings() { timings_ = Timings{}; }

GenerateResult Engine::generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                                const TokenCallback& on_token) {
  Sampler sampler(options.sampling);
  for (TokenId t : history_) sampler.accept(t);  // a continued context counts for the penalties too
  return generate(prompt, sampler, options.max_tokens, options.stop_at_end_of_generation, on_token);
}

GenerateResult Engine::generate(std::span<const TokenId> prompt, Sampler& sampler, int64_t max_tokens,
                                bool stop_at_end_of_generation, const TokenCallback& on_token) {
  const Timings before = timings_;
  GenerateResult result;
  if (!prompt.empty()) {
    prefill(prompt);
    for (TokenId t : prompt) sampler.accept(t);
  } else if (!have_logits_) {
    fail("generate: empty prompt and no previous step to continue from");
  }

  for (;;) {
    if (max_tokens >= 0 && int64_t(result.tokens.size()) >= max_tokens) {
      result.stop = StopReason::MaxTokens;
      break;
    }
    const TokenId token = sampler.sample(last_logits_);
    if (stop_at_end_of_generation && tokenizer_.is_end_of_generation(token)) {
      result.stop = StopReason::EndOfGeneration;
      break;
    }
    sampler.accept(token);
    result.tokens.push_back(token);
    const std::string piece = tokenizer_.token_to_piece(token);
    result.text += piece;
    if (on_token && !on_token(token, piece)) {
      result.stop = StopReason::Callback;
      break;
    }
    if (max_tokens >= 0 && int64_t(result.tokens.size()) >= max_tokens) {  // don't compute logits nobody reads
      result.stop = StopReason::MaxTokens;
      break;
    }
    if (n_past() >= ctx_) {
      result.stop = StopReason::ContextFull;
      break;
    }
    decode(token);
  }

  result.timings.prefill_tokens = timings_.prefill_tokens - before.prefill_tokens;
  result.timings.prefill_s = timings_.prefill_s - before.prefill_s;
  result.timings.decode_tokens = timings_.decode_tokens - before.decode_tokens;
  result.timings.decode_s = timings_.decode_s - before.decode_s;
  return result;
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::EndOfGeneration: return "eog";
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Callback: return "callback";
  }
  return "?";
}

std::string Timings::to_json() const {
  return cat("{\"load_ms\":", fmt_double(load_s * 1e3), ",\"prefill_tokens\":", prefill_tokens,
             ",\"prefill_ms\":", fmt_double(prefill_s * 1e3), ",\"prefill_tokens_per_s\":",
             fmt_double(prefill_tokens_per_s()), ",\"decode_tokens\":", decode_tokens, ",\"decode_ms\":",
             fmt_double(decode_s * 1e3), ",\"decode_tokens_per_s\":", fmt_double(decode_tokens_per_s()), "}");
}

std::string GenerateResult::to_json() const {
  std::string ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids += cat(i ? "," : "", tokens[i]);
  return cat("{\"tokens\":[", ids, "],\"text\":", json_quote(text), ",\"stop\":\"", stop_reason_name(stop),
             "\",\"timings\":", timings.to_json(), "}");
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"') out += "\\\"";
      else if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else out += char(c);
      ++i;
      continue;
    }
    // A multi-byte UTF-8 sequence: copied when well formed (no overlongs, surrogates or values past U+10FFFF).
    const int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    bool ok = len > 0 && i + size_t(len) <= s.size() && !(c >= 0xF5);
    uint32_t cp = len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + size_t(k)]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    ok = ok && !(len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) &&
         !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF));
    if (ok) {
      out.append(s.substr(i, size_t(len)));
      i += size_t(len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for one bad byte
      ++i;
    }
  }
  return out + "\"";
}

}  // namespace greta::engine
