#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "engine/stop_strings.h"

namespace greta::engine {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Plans kept prepared at once: every power-of-two bucket up to 512 tokens, with and without all logits, fits.
constexpr size_t kMaxCachedPlans = 12;
// Positions are int32 on every backend.
constexpr int64_t kMaxContext = int64_t(1) << 30;
// The default context per sequence (llama.cpp's default too), when the model was trained for more.
constexpr int64_t kDefaultContext = 4096;
constexpr int64_t kPageSize = 32;  // positions per KV page: a 32-key attention block is one page
// The pool starts with room for this many positions and doubles as sequences need more.
constexpr int64_t kInitialPoolPositions = 1024;


}  // namespace

uint64_t Engine::kv_bytes_per_position(const model::ModelConfig& c, ElemType kv_type) {
  return uint64_t(c.n_layers) * elem_bytes(kv_type, c.n_kv_heads * (c.head_dim + c.head_dim_v));
}

int64_t Engine::default_context(const model::ModelConfig& c) {
  return c.context_length > 0 ? std::min(c.context_length, kDefaultContext) : kDefaultContext;
}

uint64_t Engine::kv_bytes_per_page() const { return kv_bytes_per_position(config_, options_.kv_type) * uint64_t(kPageSize); }

namespace {

// The KV budget in pages (the sink included) and the context per sequence, from the options and the memory left.
struct KvSizing {
  int64_t ctx, max_pages;
};

KvSizing size_kv(const model::ModelConfig& config, const EngineOptions& o, uint64_t per_pos, uint64_t capacity,
                 uint64_t weight_bytes, const std::string& backend) {
  const uint64_t free_bytes = capacity > weight_bytes ? capacity - weight_bytes : 0;
  const uint64_t budget = o.kv_budget > 0 ? o.kv_budget : free_bytes / 2;
  if (o.kv_budget > free_bytes)
    fail("a KV budget of ", format_bytes(double(o.kv_budget)), " exceeds the ", format_bytes(double(free_bytes)),
         " that ", backend, " has left after the weights");
  const uint64_t per_page = per_pos * uint64_t(kPageSize);
  const int64_t max_pages = int64_t(std::min<uint64_t>(budget / per_page, uint64_t(kMaxContext / kPageSize)));
  if (max_pages < 2)
    fail("no memory left for a KV cache on ", backend, " (", format_bytes(double(capacity)), " in all, weights ",
         format_bytes(double(weight_bytes)), ")");
  const int64_t fits = (max_pages - 1) * kPageSize;  // one sequence alone
  if (o.ctx > 0) {
    if (o.ctx > kMaxContext) fail("context size ", o.ctx, " exceeds the maximum of ", kMaxContext);
    if (o.ctx > fits)
      fail("a context of ", o.ctx, " positions needs ", format_bytes(double(uint64_t(o.ctx) * per_pos)), " of KV cache; ",
           backend, " has ", format_bytes(double(uint64_t(fits) * per_pos)), " for it (the budget is half of what is ",
           "left after the weights; see --kv-budget)");
    return {o.ctx, max_pages};
  }
  return {std::min(Engine::default_context(config), fits), max_pages};
}

}  // namespace

Engine::Engine(model::GgufFile file, model::ModelConfig config, model::Tokenizer tokenizer,
               std::unique_ptr<Backend> backend, const EngineOptions& options)
    : file_(std::move(file)),
      config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      backend_(std::move(backend)),
      options_(options),
      kv_(kPageSize, 2, 2) {
  const auto start = Clock::now();
  GRETA_CHECK(backend_ != nullptr);
  if (options_.max_batch <= 0) fail("max batch ", options_.max_batch, " must be at least 1");
  if (options_.max_seqs <= 0) fail("max sequences per step ", options_.max_seqs, " must be at least 1");
  if (options_.ctx < 0) fail("context size ", options_.ctx, " must be positive (0: the default)");
  if (options_.kv_type != ElemType::F32 && options_.kv_type != ElemType::F16 && options_.kv_type != ElemType::Q8_0)
    fail("KV cache type ", elem_type_name(options_.kv_type), " is not supported (f32, f16 or q8_0)");
  weights_ = map_weights(file_, config_);
  if (options_.kv_type == ElemType::Q8_0 &&
      ((config_.n_kv_heads * config_.head_dim) % 32 != 0 || (config_.n_kv_heads * config_.head_dim_v) % 32 != 0))
    fail("a q8_0 KV cache needs K and V rows of a multiple of 32 elements; this model's are ",
         config_.n_kv_heads * config_.head_dim, " and ", config_.n_kv_heads * config_.head_dim_v, " (use --kv-type f16)");
  if (tokenizer_.vocab_size() > config_.vocab_size)
    fail(file_.path(), ": the tokenizer has ", tokenizer_.vocab_size(), " tokens, the model only ", config_.vocab_size,
         " embedding rows");

  const KvSizing sizing = size_kv(config_, options_, kv_bytes_per_position(config_, options_.kv_type),
                                  backend_->memory_capacity(), weights_.total_bytes(), backend_->name());
  ctx_ = sizing.ctx;
  options_.ctx = ctx_;
  // A pass holds at most max_seqs sequences of at most ctx positions each, so max_batch = min(max_batch, ctx *
  // max_seqs), written so that the product cannot overflow. One sequence's context is not the limit: capped at it,
  // 4 prompts of 512 at ctx 516 ran in passes of 516 tokens (docs/benchmarks.md, 2026-12-04 fourth session).
  if (options_.max_seqs <= options_.max_batch / ctx_) options_.max_batch = ctx_ * options_.max_seqs;
  const int64_t initial = std::min(kInitialPoolPositions, ctx_) / kPageSize + 2;
  kv_ = KvCache(kPageSize, initial, sizing.max_pages);
  // Sliding-window layers get their own pool when the window is shorter than the context (its budget is the main
  // pool's: a sequence never holds more of its pages than of the main pool's).
  bool any_swa = false;
  for (int64_t l = 0; l < config_.n_layers; ++l) any_swa = any_swa || config_.layer_is_swa(l);
  if (any_swa && config_.sliding_window < ctx_) kv_swa_.emplace(kPageSize, initial, sizing.max_pages);

  backend_->load_weights(weights_.table);
  last_logits_.assign(size_t(config_.vocab_size), 0.f);
  step_logits_.vocab_ = config_.vocab_size;
  plan_for(1, false);  // the decode plan; allocates the first pages of the KV pool now so memory errors show at load
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

int64_t Engine::bucket_for(int64_t n_tokens) const {
  int64_t b = 1;
  while (b < n_tokens) b *= 2;
  return std::min(b, options_.max_batch);
}

PreparedPlan& Engine::plan_for(int64_t n_tokens, bool all_logits, bool decode) {
  const int64_t swa_pages = kv_swa_ ? kv_swa_->capacity() : 0;
  if (prepared_pages_ != kv_.capacity() || prepared_swa_pages_ != swa_pages) {
    // A pool grew: every plan addresses the old one. Drop them; the backend enlarges the pool buffers (contents
    // kept) when the next plan declares them larger.
    plans_.clear();
    prepared_pages_ = kv_.capacity();
    prepared_swa_pages_ = swa_pages;
  }
  const int64_t bucket = bucket_for(n_tokens);
  const PlanKey key{bucket, all_logits, decode && bucket > 1};
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    it->second.last_use = ++plan_clock_;
    return *it->second.plan;
  }
  if (plans_.size() >= kMaxCachedPlans) {  // drop the least recently used
    auto victim = plans_.begin();
    for (auto i = plans_.begin(); i != plans_.end(); ++i)
      if (i->second.last_use < victim->second.last_use) victim = i;
    plans_.erase(victim);
  }
  PlanShape shape;
  shape.n_tokens = bucket;
  shape.n_seqs = std::min(bucket, options_.max_seqs) + 1;  // + the padding row
  shape.n_logit_rows = all_logits || bucket <= options_.max_seqs ? bucket : options_.max_seqs;
  shape.kv.page_size = kPageSize;
  shape.kv.n_pages = kv_.capacity();
  shape.kv.pages_per_seq = kv_.pages_for(ctx_);
  shape.kv.type = options_.kv_type;
  shape.kv.n_pages_swa = swa_pages;
  shape.decode = std::get<2>(key);
  const Plan plan = build_plan(config_, weights_, shape);
  CachedPlan& slot = plans_[key];
  slot.plan = backend_->prepare(plan);
  slot.last_use = ++plan_clock_;
  return *slot.plan;
}

std::vector<PreparedPlan*> Engine::prepared_plans() {
  std::vector<PreparedPlan*> out;
  for (auto& [key, cached] : plans_) out.push_back(cached.plan.get());
  return out;
}

// --- sequences --------------------------------------------------------------------------------------------------

// A sequence is live exactly while the KV cache holds it; seqs_ keeps its tokens under the same id.
Engine::Sequence& Engine::seq_at(SeqId seq) {
  GRETA_CHECK(kv_.live(seq) && size_t(seq) < seqs_.size(), "no live sequence ", seq);
  return seqs_[size_t(seq)];
}

const Engine::Sequence& Engine::seq_at(SeqId seq) const {
  GRETA_CHECK(kv_.live(seq) && size_t(seq) < seqs_.size(), "no live sequence ", seq);
  return seqs_[size_t(seq)];
}

Engine::Sequence& Engine::adopt(SeqId id) {
  if (size_t(id) >= seqs_.size()) seqs_.resize(size_t(id) + 1);
  seqs_[size_t(id)].tokens.clear();
  return seqs_[size_t(id)];
}

SeqId Engine::new_sequence() {
  const SeqId id = kv_.create();
  if (kv_swa_) GRETA_CHECK(kv_swa_->create() == id, "the KV pools' sequence ids diverged");
  adopt(id);
  return id;
}

bool Engine::swa_prefix_usable(SeqId seq, int64_t positions) const {
  // A sequence continued after `positions` reads the window before it from the sliding-window pool.
  return !kv_swa_ || positions == 0 || kv_swa_->kept_from(seq) <= std::max<int64_t>(0, positions - config_.sliding_window + 1);
}

SeqId Engine::fork_kv(SeqId src, int64_t positions) {
  const SeqId id = kv_.fork(src, positions);
  if (kv_swa_) GRETA_CHECK(kv_swa_->fork(src, positions) == id, "the KV pools' sequence ids diverged");
  return id;
}

SeqId Engine::fork_sequence(SeqId src) {
  // Share only what is in the cache, and never the last token: the fork's next step must produce its logits.
  int64_t shareable = std::max<int64_t>(0, std::min<int64_t>(kv_.length(src), int64_t(seq_at(src).tokens.size()) - 1));
  shareable -= shareable % kPageSize;
  if (!swa_prefix_usable(src, shareable)) shareable = 0;  // its window's pages are gone: recompute
  const SeqId id = fork_kv(src, shareable);
  Sequence& fork = adopt(id);  // may move seqs_: src is looked up again
  fork.tokens = seqs_[size_t(src)].tokens;
  return id;
}

std::pair<SeqId, int64_t> Engine::new_sequence_with_prefix(std::span<const TokenId> prompt) {
  // The live sequence whose cached tokens share the longest prefix with the prompt (linear in the live sequences'
  // histories: done once per new sequence, not per step).
  SeqId best = -1;
  int64_t best_len = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!kv_.live(SeqId(i))) continue;
    const auto& t = seqs_[i].tokens;
    const int64_t limit = std::min<int64_t>({kv_.length(SeqId(i)), int64_t(t.size()), int64_t(prompt.size()) - 1});
    int64_t n = 0;
    while (n < limit && t[size_t(n)] == prompt[size_t(n)]) ++n;
    n -= n % kPageSize;
    if (n > best_len && swa_prefix_usable(SeqId(i), n)) best = SeqId(i), best_len = n;
  }
  if (best < 0) return {new_sequence(), 0};
  const SeqId id = fork_kv(best, best_len);
  adopt(id).tokens.assign(prompt.begin(), prompt.begin() + best_len);
  return {id, best_len};
}

void Engine::release_sequence(SeqId seq) {
  seq_at(seq).tokens.clear();
  kv_.release(seq);
  if (kv_swa_) kv_swa_->release(seq);
  if (seq == default_seq_) {
    default_seq_ = -1;
    have_logits_ = false;
  }
}

const std::vector<TokenId>& Engine::sequence_tokens(SeqId seq) const { return seq_at(seq).tokens; }

void Engine::truncate_sequence(SeqId seq, int64_t n) {
  Sequence& s = seq_at(seq);
  if (n < 0 || n > int64_t(s.tokens.size())) fail("truncate to ", n, " tokens: the sequence has ", s.tokens.size());
  s.tokens.resize(size_t(n));
  int64_t kept = kv_.truncate(seq, n);
  if (kv_swa_) {
    // What follows position `kept` reads the window before it: without those pages, start over.
    if (!swa_prefix_usable(seq, kept)) kept = kv_.truncate(seq, 0);
    GRETA_CHECK(kv_swa_->truncate(seq, kept) == kept, "the KV pools disagree on a truncation");
  }
  if (seq == default_seq_) have_logits_ = false;
}

int64_t Engine::kv_positions_available() const { return kv_.available_pages() * kPageSize; }

void Engine::reserve_kv(int64_t positions) {
  kv_.grow(kv_.used_pages() + 1 + kv_.pages_for(positions));
  if (kv_swa_) kv_swa_->grow(kv_swa_->used_pages() + 1 + kv_swa_->pages_for(positions));
  plan_for(1, false);  // re-prepared for the pool's new size now, not in the first timed step
}

// --- steps ------------------------------------------------------------------------------------------------------

std::span<const float> StepLogits::row(size_t entry) const {
  if (entry >= has_last_.size() || !has_last_[entry]) return {};
  if (!views_[entry].empty()) return views_[entry];
  return std::span<const float>(last_).subspan(entry * size_t(vocab_), size_t(vocab_));
}

std::span<const float> StepLogits::all_rows(size_t entry) const {
  if (entry >= all_.size()) return {};
  return all_[entry];
}

const StepLogits& Engine::step(std::span<const StepEntry> entries) {
  // Check everything before changing anything: a failed step appends nothing. A sequence seen in this step carries
  // the step's stamp (no scan over the other entries).
  int64_t new_pages = 0;
  ++step_stamp_;
  for (size_t i = 0; i < entries.size(); ++i) {
    const StepEntry& e = entries[i];
    Sequence& s = seq_at(e.seq);
    if (s.step_stamp == step_stamp_) fail("sequence ", e.seq, " appears twice in one step");
    s.step_stamp = step_stamp_;
    for (TokenId t : e.tokens)
      if (t < 0 || t >= config_.vocab_size) fail("token id ", t, " is outside the vocabulary (", config_.vocab_size, ")");
    const int64_t total = int64_t(s.tokens.size() + e.tokens.size());
    if (total == kv_.length(e.seq)) fail("no tokens to process");
    if (total > ctx_)
      fail("context full: ", s.tokens.size(), " + ", e.tokens.size(), " tokens exceed the context of ", ctx_,
           " positions (reset, or use a larger --ctx)");
    new_pages += kv_.pages_for(total) - int64_t(kv_.pages(e.seq).size());
  }
  if (new_pages > kv_.available_pages())
    fail("KV cache full: the step needs ", new_pages, " more pages of ", kPageSize, " positions, ",
         kv_.available_pages(), " are left in the budget (", kv_.max_pages() - 1, " pages, ",
         format_bytes(double(uint64_t(kv_.max_pages() - 1) * kv_bytes_per_page())), ")");

  // Append the tokens and take the pages; the runs are the histories' parts not yet in the cache.
  runs_.clear();
  bool all_logits = false;
  step_logits_.has_last_.assign(entries.size(), 0);
  step_logits_.views_.assign(entries.size(), {});
  step_logits_.last_.resize(entries.size() * size_t(config_.vocab_size));
  step_logits_.all_.resize(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const StepEntry& e = entries[i];
    Sequence& s = seq_at(e.seq);
    const int64_t first = kv_.length(e.seq);
    s.tokens.insert(s.tokens.end(), e.tokens.begin(), e.tokens.end());
    GRETA_CHECK(kv_.extend(e.seq, int64_t(s.tokens.size())), "KV pages checked above");
    // The sliding-window pool never holds more of a sequence's pages than the main one: it has room too.
    if (kv_swa_) GRETA_CHECK(kv_swa_->extend(e.seq, int64_t(s.tokens.size())), "sliding-window KV pages");
    runs_.push_back({i, e.seq, first, int64_t(s.tokens.size()) - first});
    all_logits = all_logits || e.logits == LogitsWanted::All;
    if (e.logits == LogitsWanted::All) step_logits_.all_[i].resize(size_t(runs_.back().count * config_.vocab_size));
    else step_logits_.all_[i].clear();
  }

  // Pack the runs into passes of at most max_batch tokens and max_seqs sequences, in entry order. A pass that does
  // not fill its bucket is padded, unless it ends in a multi-token run that can stop at the next smaller bucket
  // instead: prefill is split where padding would add more than 32 tokens and more than a quarter of the pass;
  // otherwise (decode tokens, short steps) another pass costs more than the padding.
  size_t next = 0;
  while (next < runs_.size()) {
    pass_.clear();
    int64_t n = 0;
    size_t last = next;
    while (next < runs_.size() && int64_t(pass_.size()) < options_.max_seqs && n < options_.max_batch) {
      Run& r = runs_[next];
      const int64_t take = std::min(r.count, options_.max_batch - n);
      pass_.push_back({r.entry, r.seq, r.first, take});
      n += take;
      r.first += take;
      r.count -= take;
      last = next;
      if (r.count == 0) ++next;
    }
    const int64_t bucket = bucket_for(n);
    int64_t target = 1;
    while (target * 2 <= n) target *= 2;
    if (bucket - n > 32 && (bucket - n) * 4 > n && pass_.back().count > n - target) {
      const int64_t back = n - target;  // returned to the last run: it resumes in the next pass
      pass_.back().count -= back;
      runs_[last].first -= back;
      runs_[last].count += back;
      next = last;
    }
    run_pass(pass_, entries, all_logits, /*more_passes=*/next < runs_.size());
  }
  // A backend that pipelines passes (a layer split) may still be running the last ones: their time counts with the
  // last pass's kind.
  const auto finish_start = Clock::now();
  backend_->finish();
  count_time(last_pass_decode_, 0, 0, seconds_since(finish_start));
  // The sliding-window layers will not read these sequences' positions before their windows again.
  if (kv_swa_)
    for (const StepEntry& e : entries)
      kv_swa_->forget_before(e.seq, kv_.length(e.seq) - config_.sliding_window + 1);
  return step_logits_;
}

void Engine::run_pass(std::span<const Run> runs, std::span<const StepEntry> entries, bool all_logits,
                      bool more_passes) {
  int64_t n = 0;
  bool decode = true;
  for (const Run& r : runs) n += r.count, decode = decode && r.count == 1;
  PreparedPlan& prepared = plan_for(n, all_logits, decode);
  const Plan& plan = prepared.plan();
  const PlanShape& shape = plan.shape;
  const int64_t bucket = shape.n_tokens, pps = shape.kv.pages_per_seq;
  const bool gather = shape.n_logit_rows < bucket;
  GRETA_CHECK(int64_t(runs.size()) + 1 <= shape.n_seqs && n <= bucket, "pass of ", runs.size(), " runs, ", n, " tokens");

  // The step arrays (sized once per bucket; no allocation once the buffers have grown).
  StepArrays& a = step_arrays_;
  a.tokens.assign(size_t(bucket), 0);
  a.positions.assign(size_t(bucket), 0);
  a.kv_rows.assign(size_t(bucket), 0);  // padding: row 0 of the sink page
  a.seq.assign(size_t(bucket), int32_t(shape.n_seqs - 1));
  a.page_table.assign(size_t(shape.n_seqs * pps), 0);
  a.logit_rows.assign(gather ? size_t(shape.n_logit_rows) : 0, 0);
  const bool swa_pool = shape.kv.n_pages_swa > 0;
  a.kv_rows_swa.assign(swa_pool ? size_t(bucket) : 0, 0);
  a.page_table_swa.assign(swa_pool ? size_t(shape.n_seqs * pps) : 0, 0);
  int64_t t = 0, logit_row = 0;
  bool decode_only = true;
  bool reads = false;  // logits are read after this pass: a run wants every row, or ends its entry and wants the last
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const Sequence& s = seq_at(r.seq);
    const auto pages = kv_.pages(r.seq);
    std::copy(pages.begin(), pages.end(), a.page_table.begin() + ptrdiff_t(int64_t(i) * pps));
    if (swa_pool) {
      const auto swa_pages = kv_swa_->pages(r.seq);
      std::copy(swa_pages.begin(), swa_pages.end(), a.page_table_swa.begin() + ptrdiff_t(int64_t(i) * pps));
    }
    decode_only = decode_only && r.count == 1;
    for (int64_t k = 0; k < r.count; ++k, ++t) {
      const int64_t pos = r.first + k;
      a.tokens[size_t(t)] = s.tokens[size_t(pos)];
      a.positions[size_t(t)] = int32_t(pos);
      a.kv_rows[size_t(t)] = int32_t(kv_.row(r.seq, pos));
      if (swa_pool) a.kv_rows_swa[size_t(t)] = int32_t(kv_swa_->row(r.seq, pos));
      a.seq[size_t(t)] = int32_t(i);
    }
    const bool ends = r.first + r.count == int64_t(s.tokens.size());
    const LogitsWanted wanted = entries[r.entry].logits;
    if (gather && ends && wanted == LogitsWanted::Last) a.logit_rows[size_t(logit_row++)] = int32_t(t - 1);
    reads = reads || wanted == LogitsWanted::All || (ends && wanted != LogitsWanted::None);
  }
  a.another_pass_follows = more_passes && !reads;

  const auto step_start = Clock::now();
  backend_->execute(prepared, a.view());
  const auto step_end = Clock::now();

  // Logits: the last token of every run that ends its entry's tokens; every token for LogitsWanted::All.
  const int64_t vocab = config_.vocab_size;
  bool read_any = false;
  t = 0;
  logit_row = 0;
  for (const Run& r : runs) {
    const StepEntry& e = entries[r.entry];
    const bool ends = r.first + r.count == int64_t(seq_at(r.seq).tokens.size());
    if (e.logits == LogitsWanted::All) {  // rows for every token the step processes for the entry, in order
      const int64_t entry_first = int64_t(seq_at(r.seq).tokens.size()) - int64_t(step_logits_.all_[r.entry].size()) / vocab;
      backend_->read(prepared, plan.logits, t * vocab,
                     std::span<float>(step_logits_.all_[r.entry]).subspan(size_t((r.first - entry_first) * vocab),
                                                                         size_t(r.count * vocab)));
      read_any = true;
    }
    if (ends && e.logits != LogitsWanted::None) {
      const int64_t row = gather ? logit_row++ : t + r.count - 1;
      if (e.logits == LogitsWanted::All) {
        std::copy_n(step_logits_.all_[r.entry].end() - vocab, vocab,
                    step_logits_.last_.begin() + ptrdiff_t(r.entry * size_t(vocab)));
      } else {
        // The last pass of a step reads its rows in place where the backend lends them (64 sequences' logits are
        // 32 MB: copying them cost a step more than its host work); an earlier pass's rows would be overwritten by
        // the next pass, so they are copied.
        const std::span<const float> v =
            more_passes ? std::span<const float>() : backend_->view(prepared, plan.logits, row * vocab, size_t(vocab));
        if (int64_t(v.size()) == vocab)
          step_logits_.views_[r.entry] = v;
        else
          backend_->read(prepared, plan.logits, row * vocab,
                         std::span<float>(step_logits_.last_).subspan(r.entry * size_t(vocab), size_t(vocab)));
      }
      step_logits_.has_last_[r.entry] = 1;
      read_any = true;
    }
    t += r.count;
  }
  last_pass_decode_ = timing_ == TimingClass::Decode || (timing_ == TimingClass::Auto && decode_only);
  count_time(last_pass_decode_, int64_t(runs.size()), n, seconds_since(step_start));
  if (trace_) record_step(prepared, n, step_start, step_end, read_any);
  if (!prepared.op_spans().empty()) {
    int64_t first = prepared.op_spans().front().start_ns, last = prepared.op_spans().front().end_ns;
    for (const PreparedPlan::OpSpan& sp : prepared.op_spans()) {
      first = std::min(first, sp.start_ns);
      last = std::max(last, sp.end_ns);
    }
    timings_.device_s += double(last - first) * 1e-9;
  }
  prepared.op_spans().clear();
  if (const std::optional<double> run = prepared.take_run_device_seconds()) timings_.device_s += *run;  // not profiling
}

void Engine::count_time(bool decode, int64_t sequences, int64_t tokens, double seconds) {
  if (decode) {
    timings_.decode_tokens += sequences;
    timings_.decode_s += seconds;
  } else {
    timings_.prefill_tokens += tokens;
    timings_.prefill_s += seconds;
  }
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

// --- one conversation ----------------------------------------------------------------------------------------

SeqId Engine::default_sequence() {
  if (default_seq_ < 0) default_seq_ = new_sequence();
  return default_seq_;
}

int64_t Engine::n_past() const { return default_seq_ < 0 ? 0 : kv_.length(default_seq_); }

const std::vector<TokenId>& Engine::history() const {
  static const std::vector<TokenId> empty;
  return default_seq_ < 0 ? empty : seq_at(default_seq_).tokens;
}

std::span<const float> Engine::prefill(std::span<const TokenId> tokens) {
  if (tokens.empty()) fail("no tokens to process");
  have_logits_ = false;
  const StepEntry e{default_sequence(), tokens, LogitsWanted::Last};
  const TimingScope timing(timing_, TimingClass::Prefill);
  step(std::span(&e, 1));
  keep_default_logits();
  return last_logits_;
}

std::vector<float> Engine::prefill_all_logits(std::span<const TokenId> tokens) {
  if (tokens.empty()) fail("no tokens to process");
  have_logits_ = false;
  const StepEntry e{default_sequence(), tokens, LogitsWanted::All};
  const TimingScope timing(timing_, TimingClass::Prefill);
  const StepLogits& out = step(std::span(&e, 1));
  std::vector<float> all(out.all_rows(0).begin(), out.all_rows(0).end());
  std::copy(all.end() - config_.vocab_size, all.end(), last_logits_.begin());
  have_logits_ = true;
  return all;
}

std::span<const float> Engine::decode(TokenId token) {
  const StepEntry e{default_sequence(), std::span<const TokenId>(&token, 1), LogitsWanted::Last};
  have_logits_ = false;
  const TimingScope timing(timing_, TimingClass::Decode);
  step(std::span(&e, 1));
  keep_default_logits();
  return last_logits_;
}

void Engine::keep_default_logits() {
  // The step's one row becomes last_logits_ by a swap where the step copied it out (a decode step spent about as long
  // copying the vocabulary's floats once more as it took to read them back: tens of microseconds of a few
  // milliseconds), or by its one copy where the backend lent a view.
  GRETA_CHECK(!step_logits_.row(0).empty(), "a step of the default sequence without its logits");
  if (step_logits_.views_[0].empty() && step_logits_.last_.size() == last_logits_.size()) {
    std::swap(step_logits_.last_, last_logits_);
    step_logits_.has_last_.assign(step_logits_.has_last_.size(), 0);  // the step's row moved out
  } else {
    std::copy_n(step_logits_.row(0).begin(), config_.vocab_size, last_logits_.begin());
  }
  have_logits_ = true;
}

void Engine::reset() {
  if (default_seq_ >= 0) release_sequence(default_seq_);
  have_logits_ = false;
}

void Engine::reset_timings() { timings_ = Timings{}; }

GenerateResult Engine::generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                                const TokenCallback& on_token) {
  Sampler sampler(options.sampling);
  for (TokenId t : history()) sampler.accept(t);  // a continued context counts for the penalties too
  return generate(prompt, sampler, options.max_tokens, options.stop_at_end_of_generation, on_token, options.stop);
}

GenerateResult Engine::generate(std::span<const TokenId> prompt, Sampler& sampler, int64_t max_tokens,
                                bool stop_at_end_of_generation, const TokenCallback& on_token,
                                std::vector<std::string> stop) {
  const Timings before = timings_;
  GenerateResult result;
  StopMatcher stops(std::move(stop));
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
    const std::string released = stops.push(tokenizer_.token_to_piece(token));
    result.text += released;
    if (on_token && !on_token(token, released)) {
      result.stop = StopReason::Callback;
      break;
    }
    if (stops.matched()) {
      result.stop = StopReason::StopString;
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

  // Text held back for a stop string that never completed is the generation's end.
  if (result.stop != StopReason::Callback) {
    const std::string rest = stops.flush();
    if (!rest.empty()) {
      result.text += rest;
      if (on_token) on_token(result.tokens.back(), rest);
    }
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
    case StopReason::StopString: return "stop";
  }
  return "?";
}


}  // namespace greta::engine
