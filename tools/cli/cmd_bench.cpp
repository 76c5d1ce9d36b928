// greta-vk bench MODEL: prompt processing (pp: one prefill of P tokens) and token generation (tg: N single-token
// decode steps) speeds, like llama-bench: every test runs once to warm up, then R times; rows show mean ± sample
// standard deviation of tokens/s, with the model, the backend and the device in every row. Decode rows also show
// the effective weight bandwidth (weights read per decode token x tokens/s): a dense model's step reads all weights
// once; a mixture of experts' reads its dense weights and, per layer, the rows of the k experts of E it chose.
// Prompts are random token ids from a fixed seed, so runs are comparable across machines and backends.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "args.h"
#include "backend_factory.h"
#include "commands.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "bench_batched.h"
#include "generation.h"
#include "json_output.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_bench_options[] = {
    {"n-prompt", "p", true, "prompt lengths to test, comma separated (default 512; 0: no prompt test)"},
    {"n-gen", "n", true, "generated token counts to test, comma separated (default 128; 0: no generation test)"},
    {"repetitions", "r", true, "timed runs per test (default 5)"},
    {"n-depth", "d", true, "tokens already in the context before each test, comma separated (default 0)"},
    {"batch", "b", true, "tokens per prefill step (default 512)"},
    {"batched", nullptr, false, "many sequences at once, like llama-batched-bench (--npp, --ntg, --npl)"},
    {"npp", nullptr, true, "--batched: prompt tokens per sequence, comma separated (default 512)"},
    {"ntg", nullptr, true, "--batched: generated tokens per sequence, comma separated (default 128)"},
    {"npl", nullptr, true, "--batched: sequences, comma separated (default 1,4,16,64)"},
    {"ctx", "c", true, "--batched: positions per sequence the plans are made for, as a server's --ctx (default: the "
                       "longest npp + ntg)"},
    {"output", "o", true, "md | csv | json (default md)"},
    {"profile", nullptr, false, "also print the time share of each op kind, the matmuls per weight role, type and "
                                "shape (backend profiling on; with --batched, of the decode steps)"},
    TraceRequest::option,
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk bench MODEL [-p 512] [-n 128] [-d 0] [-r 5] [-b 512] [-o md|csv|json] [--profile] [--trace FILE] "
    "[--kv-type f16|f32|q8_0] [--backend cpu|vk|hip] [--device N] [--threads N]\n"
    "       greta-vk bench MODEL --batched [--npp 512] [--ntg 128] [--npl 1,4,16,64] [--ctx N] [-b 512] "
    "[-o md|csv|json] [--profile] [--trace FILE] ...";

constexpr uint64_t kTokenSeed = 1234;
constexpr int64_t kMaxTestTokens = int64_t(1) << 20;
constexpr int64_t kMaxRepetitions = 1000;

}  // namespace

std::vector<int64_t> int_list(const Args& args, std::string_view name, std::vector<int64_t> fallback) {
  if (!args.has(name)) return fallback;
  std::vector<int64_t> values;
  const std::string text = args.get(name);
  for (const std::string& item : comma_items(text)) {
    const std::optional<int64_t> v = parse_integer(item, 0, kMaxTestTokens);
    if (!v) fail("--", name, " '", text, "': expected token counts from 0 to ", kMaxTestTokens, ", comma separated");
    values.push_back(*v);
  }
  return values;
}

namespace {

struct TestResult {
  std::string name;        // "pp512", "tg128", "tg128 @ d4096"
  bool is_decode = false;
  int64_t n_tokens = 0, depth = 0;
  std::vector<double> samples;  // tokens/s per timed run
  double mean = 0, stddev = 0;
  std::map<std::string, double> op_seconds;  // per op kind, summed over the timed runs (--profile)
  double device_fraction = 0;                 // device busy time / wall time of the timed runs (0: not measured)
  // A model spread over several backends: the hand-offs between them during the timed runs, and those runs' time.
  int64_t crossings = 0;
  double crossing_s = 0, wall_s = 0;
};

void summarize(TestResult& r) {
  double sum = 0;
  for (double s : r.samples) sum += s;
  r.mean = sum / double(r.samples.size());
  double sq = 0;
  for (double s : r.samples) sq += (s - r.mean) * (s - r.mean);
  r.stddev = r.samples.size() > 1 ? std::sqrt(sq / double(r.samples.size() - 1)) : 0;
}

std::string count_string(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f B", double(n) / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2f M", double(n) / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.2f K", double(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

std::string fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string csv_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The model and the machine: the same in every row.
struct BenchContext {
  std::string model, name, backend, device;
  uint64_t model_bytes = 0, params = 0;
  uint64_t decode_bytes = 0;             // weights read per single-sequence decode token
  int64_t n_experts = 0, n_experts_used = 0;
};

double weight_gbps(const BenchContext& c, const TestResult& r) { return double(c.decode_bytes) * r.mean / 1e9; }

void print_md(const BenchContext& c, const std::vector<TestResult>& results) {
  std::printf("| model | size | params | backend | device | test | t/s | weights GB/s |\n");
  std::printf("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |\n");
  for (const auto& r : results)
    std::printf("| %s | %s | %s | %s | %s | %s | %s ± %s | %s |\n", c.model.c_str(), format_bytes(double(c.model_bytes)).c_str(),
                count_string(c.params).c_str(), c.backend.c_str(), c.device.c_str(), r.name.c_str(),
                fixed(r.mean).c_str(), fixed(r.stddev).c_str(), r.is_decode ? fixed(weight_gbps(c, r)).c_str() : "");
  if (c.n_experts > 0)
    std::printf("\nmodel bytes %llu (weights); read per decode token %llu (dense weights + %lld of %lld experts per "
                "layer); weights GB/s = that x decode tokens/s\n",
                static_cast<unsigned long long>(c.model_bytes), static_cast<unsigned long long>(c.decode_bytes),
                static_cast<long long>(c.n_experts_used), static_cast<long long>(c.n_experts));
  else
    std::printf("\nmodel bytes %llu (weights); weights GB/s = model bytes x decode tokens/s\n",
                static_cast<unsigned long long>(c.model_bytes));
}

void print_csv(const BenchContext& c, const std::vector<TestResult>& results) {
  std::printf("model,name,model_bytes,params,backend,device,test,n_tokens,repetitions,avg_ts,stddev_ts,weights_gbps,"
              "samples_ts\n");
  for (const auto& r : results) {
    std::string samples;
    for (size_t i = 0; i < r.samples.size(); ++i) samples += cat(i ? ";" : "", fixed(r.samples[i], 3));
    std::printf("%s,%s,%llu,%llu,%s,%s,%s,%lld,%zu,%s,%s,%s,%s\n", csv_quote(c.model).c_str(), csv_quote(c.name).c_str(),
                static_cast<unsigned long long>(c.model_bytes), static_cast<unsigned long long>(c.params),
                csv_quote(c.backend).c_str(), csv_quote(c.device).c_str(), r.name.c_str(),
                static_cast<long long>(r.n_tokens), r.samples.size(), fixed(r.mean, 3).c_str(), fixed(r.stddev, 3).c_str(),
                r.is_decode ? fixed(weight_gbps(c, r), 3).c_str() : "", csv_quote(samples).c_str());
  }
}

void print_json(const BenchContext& c, const std::vector<TestResult>& results) {
  Json out = Json::array();
  for (const TestResult& r : results) {
    Json row = {{"model", c.model}, {"name", c.name}, {"model_bytes", c.model_bytes}, {"params", c.params},
                {"backend", c.backend}, {"device", c.device}, {"test", r.name}, {"n_tokens", r.n_tokens},
                {"avg_ts", r.mean}, {"stddev_ts", r.stddev}, {"samples_ts", r.samples}};
    if (r.is_decode) row["weights_gbps"] = weight_gbps(c, r);
    if (r.is_decode) row["decode_bytes"] = c.decode_bytes;
    if (!r.op_seconds.empty()) row["op_seconds"] = r.op_seconds;
    if (r.device_fraction > 0) row["device_fraction"] = r.device_fraction;
    out.push_back(std::move(row));
  }
  std::printf("%s\n", out.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
}

// Time share per op kind, one table per test.
void print_profile(std::FILE* out, const std::vector<TestResult>& results) {
  for (const auto& r : results) {
    double total = 0;
    for (const auto& [kind, s] : r.op_seconds) total += s;
    std::vector<std::pair<std::string, double>> rows(r.op_seconds.begin(), r.op_seconds.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::fprintf(out, "\nprofile %s (per run; backend profiling on, so slightly slower than the table above)\n",
                 r.name.c_str());
    std::fprintf(out, "device busy (first op start to last op end per step) %s%% of the wall time; host and idle "
                 "%s%%\n", fixed(100 * r.device_fraction, 1).c_str(), fixed(100 * (1 - r.device_fraction), 1).c_str());
    std::fprintf(out, "| op | ms | share |\n| --- | ---: | ---: |\n");
    for (const auto& [kind, s] : rows)
      std::fprintf(out, "| %s | %s | %s%% |\n", kind.c_str(), fixed(s * 1e3 / double(r.samples.size()), 3).c_str(),
                   fixed(total > 0 ? 100 * s / total : 0, 1).c_str());
  }
}

// Without profiling, where the backend measures each step's device time (two timestamps, nothing serialized): the
// share of the wall time the device was busy, the rest being the host's (submission, waits, read-back) and idle time.
void print_device_busy(std::FILE* out, const std::vector<TestResult>& results) {
  std::string line;
  for (const auto& r : results)
    if (r.device_fraction > 0) line += cat(line.empty() ? "" : ", ", r.name, " ", fixed(100 * r.device_fraction, 1), "%");
  if (!line.empty()) std::fprintf(out, "\ndevice busy (first to last command of each step): %s of the wall time\n", line.c_str());
}

class Bench {
public:
  Bench(engine::Engine& engine, bool profile, const engine::SplitBackend* split)
      : engine_(engine), profile_(profile), split_(split) {}

  TestResult run(bool decode, int64_t n, int64_t depth, int64_t repetitions) {
    TestResult r;
    r.is_decode = decode;
    r.n_tokens = n;
    r.depth = depth;
    r.name = cat(decode ? "tg" : "pp", n, depth > 0 ? cat(" @ d", depth) : std::string());
    const std::vector<model::TokenId> tokens = random_tokens(n), context = random_tokens(depth);
    // The context of `depth` tokens before each run (untimed), like llama-bench -d.
    const auto start_context = [&] {
      engine_.reset();
      if (depth > 0) engine_.prefill(context);
    };
    // Warm-up: builds and prepares the plans, faults in memory, wakes up clocks.
    start_context();
    if (decode) engine_.decode(tokens[0]);
    else engine_.prefill(tokens);
    clear_op_seconds(engine_);
    const double device_before = engine_.timings().device_s;
    double wall = 0;
    for (int64_t rep = 0; rep < repetitions; ++rep) {
      start_context();
      const engine::CrossingStats before = split_ ? split_->crossings() : engine::CrossingStats{};
      const auto start = std::chrono::steady_clock::now();
      if (decode) {
        for (model::TokenId t : tokens) engine_.decode(t);
      } else {
        engine_.prefill(tokens);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (split_) {
        r.crossings += split_->crossings().copies - before.copies;
        r.crossing_s += split_->crossings().seconds - before.seconds;
      }
      r.samples.push_back(double(n) / std::max(seconds, 1e-9));
      wall += seconds;
    }
    r.wall_s = wall;
    if (profile_) r.op_seconds = collect_op_seconds(engine_);
    r.device_fraction = wall > 0 ? (engine_.timings().device_s - device_before) / wall : 0;
    summarize(r);
    return r;
  }

private:
  std::vector<model::TokenId> random_tokens(int64_t n) {
    engine::Rng rng(kTokenSeed + uint64_t(n));
    std::vector<model::TokenId> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = model::TokenId(rng.next() % uint64_t(engine_.vocab_size()));
    return tokens;
  }
  engine::Engine& engine_;
  bool profile_;
  const engine::SplitBackend* split_;
};

// Where the parts of a spread model live and what crossing between them cost in each test.
void print_crossings(std::FILE* out, const std::string& placement, const std::vector<TestResult>& results) {
  std::fprintf(out, "\nlayer split: %s\n| test | hand-offs per run | crossing ms per run | share of the run |\n"
                    "| --- | ---: | ---: | ---: |\n", placement.c_str());
  for (const TestResult& r : results) {
    const double runs = double(std::max<size_t>(r.samples.size(), 1));
    std::fprintf(out, "| %s | %s | %s | %s%% |\n", r.name.c_str(), fixed(double(r.crossings) / runs, 0).c_str(),
                 fixed(r.crossing_s * 1e3 / runs, 3).c_str(), fixed(r.wall_s > 0 ? 100 * r.crossing_s / r.wall_s : 0, 1).c_str());
  }
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const auto specs = join_options({k_bench_options, kv_option_specs(), backend_option_specs()});
  Args args(argc, argv, specs);
  if (args.has("help")) {
    std::printf("usage: %s\n\nPrefill (pp) and decode (tg) speed, mean ± stddev over R runs after a warm-up.\n\n%s",
                k_usage, usage_options(specs).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  if (args.has("batched")) return run_batched_bench(args);
  for (const char* only : {"npp", "ntg", "npl", "ctx"})
    if (args.has(only)) fail("--", only, " needs --batched");
  const std::vector<int64_t> prompt_sizes = int_list(args, "n-prompt", {512});
  const std::vector<int64_t> gen_sizes = int_list(args, "n-gen", {128});
  const std::vector<int64_t> depths = int_list(args, "n-depth", {0});
  const int64_t repetitions = args.get_int("repetitions", 5);
  if (repetitions < 1 || repetitions > kMaxRepetitions)
    fail("-r ", repetitions, ": repetitions must be between 1 and ", kMaxRepetitions);
  const int64_t batch = args.get_int("batch", 512);
  if (batch < 1 || batch > kMaxTestTokens) fail("-b ", batch, ": must be between 1 and ", kMaxTestTokens);
  const std::string output = args.get("output", "md");
  if (output != "md" && output != "csv" && output != "json") fail("-o ", output, ": choose md, csv or json");
  const bool profile = args.has("profile");
  TraceRequest trace(args);
  BackendRequest backend = backend_request_from(args);
  backend.experiment_switches = true;  // GRETA_VK_* kernel switches, for measurements
  int64_t ctx = 0;
  for (int64_t p : prompt_sizes) ctx = std::max(ctx, p);
  for (int64_t n : gen_sizes) ctx = std::max(ctx, n);
  if (ctx == 0) fail("nothing to benchmark: -p and -n are both 0");
  ctx += *std::max_element(depths.begin(), depths.end());

  const std::string& path = args.positional()[0];
  LoadedModel loaded = load_model(read_model(path), backend, engine::EngineOptions{.ctx = ctx, .max_batch = batch, .kv_type = kv_type_from(args)});
  engine::Engine& engine = loaded.engine;
  engine.backend().set_profiling(profile);
  engine.backend().set_step_timing(true);  // each step's device time (nothing serialized): print_device_busy
  trace.attach(engine);

  BenchContext context;
  context.model = std::filesystem::path(path).stem().string();
  context.name = engine.config().name;
  context.backend = engine.backend().name();
  context.device = loaded.device;
  context.model_bytes = engine.weights().total_bytes();
  for (const auto& t : engine.file().tensors()) context.params += t.n_elements;
  // Expert tensors are the 3-D ones (experts x rows x columns); a decode token reads n_used of their n_experts slices.
  context.n_experts = engine.config().n_experts;
  context.n_experts_used = engine.config().n_experts_used;
  uint64_t expert_bytes = 0;
  if (context.n_experts > 0)
    for (const auto& t : engine.file().tensors())
      if (t.dims.size() == 3) expert_bytes += t.n_bytes;
  context.decode_bytes = context.model_bytes - expert_bytes +
                         (context.n_experts > 0 ? expert_bytes / uint64_t(context.n_experts) *
                                                      uint64_t(context.n_experts_used) : 0);

  Bench bench(engine, profile, loaded.split);
  std::vector<TestResult> results;
  for (int64_t d : depths) {
    for (int64_t p : prompt_sizes)
      if (p > 0) results.push_back(bench.run(/*decode=*/false, p, d, repetitions));
    for (int64_t n : gen_sizes)
      if (n > 0) results.push_back(bench.run(/*decode=*/true, n, d, repetitions));
  }

  if (output == "md") print_md(context, results);
  else if (output == "csv") print_csv(context, results);
  else print_json(context, results);
  if (profile && output != "json") print_profile(output == "md" ? stdout : stderr, results);
  if (!profile && output != "json") print_device_busy(output == "md" ? stdout : stderr, results);
  if (loaded.split) print_crossings(output == "md" ? stdout : stderr, loaded.split->placement().describe(), results);
  trace.write();
  return 0;
}

}  // namespace greta::cli
