#include "generation.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.h"
#include "progress.h"

namespace greta::cli {

namespace {

constexpr uint64_t kMaxPromptFileBytes = uint64_t(64) << 20;

constexpr OptionSpec k_sampling_options[] = {
    {"temp", nullptr, true, "temperature (default 0.8; 0: greedy)"},
    {"top-k", nullptr, true, "keep the K most likely tokens (default 40; 0: off)"},
    {"top-p", nullptr, true, "keep the smallest set with probability mass >= P (default 0.95; 1: off)"},
    {"min-p", nullptr, true, "drop tokens below P x the top probability (default 0.05; 0: off)"},
    {"repeat-penalty", nullptr, true, "penalty for repeated tokens (default 1: off)"},
    {"repeat-last-n", nullptr, true, "tokens the penalties look back over (default 64; 0: off, -1: all)"},
    {"frequency-penalty", nullptr, true, "subtract F x count of a token (default 0)"},
    {"presence-penalty", nullptr, true, "subtract P once per seen token (default 0)"},
    {"seed", nullptr, true, "sampling seed (default: random, printed in the summary; -1: random)"},
};

float float_option(const Args& args, std::string_view name, float fallback) {
  const double v = args.get_double(name, fallback);
  if (!std::isfinite(v) || std::fabs(v) > 1e30) fail("--", name, " ", v, ": not a usable number");
  return float(v);
}

int32_t int32_option(const Args& args, std::string_view name, int32_t fallback) {
  const int64_t v = args.get_int(name, fallback);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail("--", name, " ", v, ": out of range");
  return int32_t(v);
}

}  // namespace

std::vector<OptionSpec> join_options(std::initializer_list<std::span<const OptionSpec>> tables) {
  std::vector<OptionSpec> all;
  for (const auto& t : tables) all.insert(all.end(), t.begin(), t.end());
  return all;
}

std::span<const OptionSpec> sampling_option_specs() { return k_sampling_options; }

constexpr OptionSpec k_kv_options[] = {
    {"kv-type", nullptr, true, "KV cache element type: f16 (default), f32 or q8_0 (int8 per 32, 1.125 bytes each)"},
};

std::span<const OptionSpec> kv_option_specs() { return k_kv_options; }

engine::ElemType kv_type_from(const Args& args) {
  const std::string t = args.get("kv-type", "f16");
  if (t == "f16") return engine::ElemType::F16;
  if (t == "f32") return engine::ElemType::F32;
  if (t == "q8_0") return engine::ElemType::Q8_0;
  fail("--kv-type ", t, ": choose f16, f32 or q8_0");
}

engine::SamplerParams sampling_params_from(const Args& args) {
  engine::SamplerParams p;
  p.temperature = float_option(args, "temp", p.temperature);
  p.top_k = int32_option(args, "top-k", p.top_k);
  p.top_p = float_option(args, "top-p", p.top_p);
  p.min_p = float_option(args, "min-p", p.min_p);
  p.repeat_penalty = float_option(args, "repeat-penalty", p.repeat_penalty);
  p.repeat_last_n = int32_option(args, "repeat-last-n", p.repeat_last_n);
  p.frequency_penalty = float_option(args, "frequency-penalty", p.frequency_penalty);
  p.presence_penalty = float_option(args, "presence-penalty", p.presence_penalty);
  // A random seed unless one is given: every chat should not give the same replies. The summary (and --json)
  // print it, so any run can be reproduced with --seed.
  const std::string text = args.has("seed") ? args.get("seed") : "-1";
  {
    if (text == "-1") {
      std::random_device device;
      p.seed = ((uint64_t(device()) << 32) ^ device()) >> 11;  // 53 bits: exact in JSON readers' doubles
    } else {
      errno = 0;
      char* end = nullptr;
      const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
      if (errno != 0 || end == text.c_str() || *end != '\0' || text[0] == '-')
        fail("--seed '", text, "': expected a non-negative integer (or -1 for a random seed)");
      p.seed = v;
    }
  }
  if (p.repeat_last_n < -1) fail("--repeat-last-n ", p.repeat_last_n, ": must be -1 (all), 0 (off) or positive");
  engine::Sampler check(p);  // the sampler's own validation (ranges of top-p, penalties, ...)
  return p;
}

std::string read_prompt(const Args& args) {
  if (args.has("prompt") && args.has("file")) fail("give the prompt with -p or -f, not both");
  if (args.has("prompt")) return args.get("prompt");
  if (!args.has("file")) fail("no prompt: give one with -p TEXT or -f FILE");
  const std::string path = args.get("file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("-f ", path, ": cannot open the file");
  std::string text;
  char buffer[65536];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, size_t(in.gcount()));
    if (text.size() > kMaxPromptFileBytes) fail("-f ", path, ": the prompt file is larger than 64 MiB");
  }
  if (in.bad()) fail("-f ", path, ": read error");
  // One final newline is the file's end, not the prompt's (as llama.cpp reads -f).
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

std::vector<model::TokenId> parse_token_list(std::string_view text) {
  std::vector<model::TokenId> ids;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    size_t j = i;
    if (text[j] == '-') ++j;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    const std::string number(text.substr(i, j - i));
    if (number.empty() || number == "-" ||
        (j < text.size() && text[j] != ' ' && text[j] != ',' && text[j] != '\t' && text[j] != '\n' && text[j] != '\r'))
      fail("--tokens: '", text.substr(i, std::min<size_t>(j + 1, text.size()) - i), "' is not a token id");
    errno = 0;
    const long long v = std::strtoll(number.c_str(), nullptr, 10);
    if (errno != 0 || v < 0 || v > std::numeric_limits<model::TokenId>::max())
      fail("--tokens: ", number, " is not a valid token id");
    ids.push_back(model::TokenId(v));
    i = j;
  }
  if (ids.empty()) fail("--tokens: no token ids given");
  return ids;
}

ModelFiles read_model(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  model::GgufFile file = model::GgufFile::open(path);
  model::ModelConfig config = model::ModelConfig::from_gguf(file);
  model::Tokenizer tokenizer = model::Tokenizer::from_gguf(file);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ModelFiles{std::move(file), std::move(config), std::move(tokenizer), seconds};
}

LoadedModel load_model(ModelFiles files, const BackendRequest& backend, const engine::EngineOptions& options) {
  BackendChoice choice = create_model_backend(backend, files.config, engine::map_weights(files.file, files.config), options);
  std::fprintf(stderr, "%s\n", describe_backend(choice).c_str());
  if (!choice.placement.empty()) std::fprintf(stderr, "placement: %s\n", choice.placement.c_str());
  LoadProgress progress(files.file.path());
  LoadedModel loaded{engine::Engine(std::move(files.file), std::move(files.config), std::move(files.tokenizer),
                                    std::move(choice.backend), options),
                     choice.kind, choice.device, 0, choice.split};
  loaded.load_s = files.open_s + loaded.engine.timings().load_s;
  if (const std::string note = loaded.engine.backend().weights_note(); !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  const engine::Engine& e = loaded.engine;
  const int64_t trained = e.config().context_length;
  if (options.ctx > 0 && trained > 0 && options.ctx > trained)
    std::fprintf(stderr, "warning: --ctx %lld is above the %lld tokens the model was trained for; past those its "
                 "output degrades\n", static_cast<long long>(options.ctx), static_cast<long long>(trained));
  const uint64_t budget = uint64_t(e.kv_cache().max_pages() - 1) * e.kv_bytes_per_page();
  std::fprintf(stderr, "context: %lld tokens per sequence%s, KV cache %s, up to %s (allocated as used)\n",
               static_cast<long long>(e.context_size()),
               trained > e.context_size() ? cat(" (trained for ", trained, "; --ctx to change)").c_str() : "",
               engine::elem_type_name(e.options().kv_type), format_bytes(double(budget)).c_str());
  return loaded;
}

std::string describe_crossings(const LoadedModel& loaded) {
  if (!loaded.split) return "";
  const engine::CrossingStats& c = loaded.split->crossings();
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1f ms", c.seconds * 1e3);
  return cat("crossing devices: ", c.copies, " hand-offs, ", format_bytes(double(c.bytes)), ", ", ms);
}

void clear_op_seconds(engine::Engine& engine) {
  for (engine::PreparedPlan* plan : engine.prepared_plans())
    std::fill(plan->mutable_op_seconds().begin(), plan->mutable_op_seconds().end(), 0.0);
}

namespace {

// A matmul's row in a profile: its weight's role (the op's label without the block prefix), type and shape, e.g.
// "matmul ffn_down q6_K 4096x14336", so that a profile tells the matrices and weight types a step waits on.
std::string matmul_profile_name(const engine::PlanOp& op, const engine::ModelWeights& weights) {
  const auto& mm = std::get<engine::MatMulOp>(op.op);
  std::string role = op.label;
  if (op.layer >= 0) {
    const std::string prefix = cat("blk.", op.layer, ".");
    if (role.starts_with(prefix)) role.erase(0, prefix.size());
  }
  const auto& w = weights.table.at(size_t(mm.weight));
  return cat("matmul ", role, " ", model::type_name(w.type), " ", mm.out_features, "x", mm.in_features);
}

}  // namespace

std::map<std::string, double> collect_op_seconds(engine::Engine& engine) {
  std::map<std::string, double> out;
  for (engine::PreparedPlan* plan : engine.prepared_plans())
    for (size_t i = 0; i < plan->plan().ops.size(); ++i) {
      const engine::PlanOp& op = plan->plan().ops[i];
      const bool matmul = op.kind() == engine::OpKind::MatMul;
      const std::string name = matmul ? matmul_profile_name(op, engine.weights()) : engine::op_kind_name(op.kind());
      out[name] += plan->op_seconds()[i];
    }
  return out;
}

std::string format_rate(double tokens_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", tokens_per_s);
  return buf;
}

TraceRequest::TraceRequest(const Args& args) : path_(args.get("trace", "")) {
  if (args.has("trace") && path_.empty()) fail("--trace needs a file name");
  if (path_.empty()) return;
  // Fail now, not after the whole run: the file must be writable (it is written again at the end).
  std::FILE* existing = std::fopen(path_.c_str(), "rb");
  if (existing) std::fclose(existing);
  std::FILE* f = std::fopen(path_.c_str(), "ab");
  if (!f) fail("--trace ", path_, ": cannot write it: ", std::strerror(errno));
  std::fclose(f);
  if (!existing) std::remove(path_.c_str());  // leave nothing behind should the run fail
}

void TraceRequest::attach(engine::Engine& engine) {
  if (path_.empty()) return;
  engine.backend().set_profiling(true);
  engine.set_trace(&trace_);
}

void TraceRequest::write() const {
  if (path_.empty()) return;
  trace_.write(path_);
  std::fprintf(stderr, "wrote the trace %s (%zu spans)\n", path_.c_str(), trace_.size());
}

}  // namespace greta::cli
