#include "op_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <type_traits>
#include <variant>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "hip/hip_loader.h"
#include "model/quants.h"

namespace greta::bench {

namespace {

const cli::OptionSpec k_op_options[] = {
    {"quick", "q", false, "small shapes (the defaults on a CPU device), 1 warm-up, --max-time 0.2: the CTest test"},
    {"max-time", nullptr, true, "stop repeating a case after this many seconds, at least 3 runs (default 1)"},
    {"copy-mib", nullptr, true, "buffer of the copy-bandwidth ceiling in MiB (default 256; 16 with small shapes)"},
    {"cold-l2", nullptr, false,
     "evict the GPU's last-level cache before every run (engine::CacheFlush), as a model's step finds its weights"},
    {"help", "h", false, "show this help"},
};

std::string number(double v, const char* format) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Table cells: two decimals, three significant digits below 1 (lavapipe's TFLOP/s).
std::string cell(double v) { return number(v, std::fabs(v) >= 1 || v == 0 ? "%.2f" : "%.3g"); }

std::string json_number(double v) { return std::isnan(v) ? "null" : number(v, "%.6g"); }

// The variant describe_kernels names for the plan's only op ("op  matvec_q4_0\n" -> "matvec_q4_0").
std::string kernel_of(const engine::PreparedPlan& prepared) {
  std::string d = vk::describe_kernels(prepared);
  const size_t at = d.find("  ");
  d = at == std::string::npos ? d : d.substr(at + 2);
  while (!d.empty() && d.back() == '\n') d.pop_back();
  return d;
}

Result blank_row(const OpSpec& spec) {
  Result r;
  r.shape = spec.shape;
  r.type = spec.type;
  return r;
}

void check_validation_log(const BenchBackend& b, const engine::Backend& backend) {
  if (!b.validation_messages) return;
  const auto messages = b.validation_messages(backend);
  if (!messages.empty()) fail("the validation layer reported ", messages.size(), " message(s); first: ", messages[0]);
}

}  // namespace

std::optional<cli::Args> parse_op_options(int argc, char** argv, const char* name, const char* what,
                                          std::span<const cli::OptionSpec> extra, OpBenchOptions& out) {
  std::vector<cli::OptionSpec> specs(shared_option_specs().begin(), shared_option_specs().end());
  specs.insert(specs.end(), extra.begin(), extra.end());
  specs.insert(specs.end(), std::begin(k_op_options), std::end(k_op_options));
  cli::Args args(argc - 1, argv + 1, specs);
  if (args.has("help")) {
    std::printf("usage: %s [options]\n%s\n\n%s", name, what, cli::usage_options(specs).c_str());
    return std::nullopt;
  }
  args.expect_positional(0, 0, cat(name, " [options]; see --help"));
  read_shared_options(args, out);
  out.quick = args.has("quick");
  if (out.quick && !args.has("warmup")) out.warmup = 1;
  out.max_seconds = args.get_double("max-time", out.quick ? 0.2 : 1.0);
  if (!(out.max_seconds >= 0)) fail("--max-time must be >= 0");
  out.cold_l2 = args.has("cold-l2");
  if (args.has("copy-mib")) {
    const double copy_mib = args.get_double("copy-mib", 0);
    if (!(copy_mib >= 1 && copy_mib <= 65536)) fail("--copy-mib must be 1..65536");
    out.copy_bytes = uint64_t(copy_mib * 1048576.0) / 16 * 16;
  }
  return args;
}

OpBench::OpBench(std::string name, const OpBenchOptions& options)
    : name_(std::move(name)), options_(options), context_(open_context(options)) {
  const vk::DeviceInfo& info = context_->info();
  backend_.device = info.name;
  backend_.driver = info.driver_name + " " + info.driver_info;
  backend_.index = int(info.index);
  backend_.cpu_device = info.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  backend_.create = [device = options.device, validation = options.validation](const OpSpec& spec) {
    vk::VkBackendOptions o;
    o.device = device;
    o.validation = validation;
    o.matmul = spec.kernel;
    o.switches = vk::ExperimentSwitches::from_environment();  // GRETA_VK_MATVEC=... and the like, for measurements
    return vk::create_vk_backend(o);
  };
  backend_.kernel_name = [](const engine::OpCase&, const engine::PreparedPlan& prepared) {
    return kernel_of(prepared);
  };
  backend_.validation_messages = [](const engine::Backend& b) { return vk::validation_messages(b); };
  backend_.ceiling = [ctx = context_.get()](const OpBenchOptions& opts) {
    BenchOptions o = opts;
    o.iterations = std::min(o.iterations, 10);
    o.warmup = std::min(o.warmup, 2);
    const Row row = measure_shader_copy(*ctx, opts.copy_bytes, o);
    return BenchBackend::Ceiling{
        row.gbps(), cat("% copy: fraction of the shader_u32x4 copy bandwidth (vk_copy_bench) of ",
                        format_bytes(double(row.bytes)), " measured in this run: ", number(row.gbps(), "%.1f"),
                        " GB/s counting read + write")};
  };
  init();
}

OpBench::OpBench(std::string name, const OpBenchOptions& options, BenchBackend backend)
    : name_(std::move(name)), options_(options), backend_(std::move(backend)) {
  init();
}

void OpBench::init() {
  small_shapes_ = options_.quick;
  if (!small_shapes_ && backend_.cpu_device) {
    small_shapes_ = true;
    note(cat(backend_.device, " is a CPU device: the default shapes are the --quick ones (the GPU-sized defaults "
             "would take minutes here); shapes given on the command line are used as given"));
  }
  if (options_.copy_bytes == 0) options_.copy_bytes = uint64_t(small_shapes_ ? 16 : 256) << 20;
}

OpBench::~OpBench() = default;

const vk::DeviceInfo& OpBench::device() const {
  GRETA_CHECK(context_, "OpBench::device(): not a Vulkan bench");
  return context_->info();
}

double OpBench::copy_gbps() {
  if (copy_gbps_ > 0) return copy_gbps_;
  BenchBackend::Ceiling c = backend_.ceiling(options_);
  copy_gbps_ = c.gbps;
  note(std::move(c.note));
  return copy_gbps_;
}

Column OpBench::percent_of_copy(double gbps) { return {backend_.ceiling_column, 100.0 * gbps / copy_gbps()}; }

Result OpBench::run(const OpSpec& spec) {
  Result r = blank_row(spec);
  Built timed = spec.build(false);
  auto backend = backend_.create(spec);
  auto prepared = timed.c.load_and_prepare(*backend);
  timed.c.run(*backend, *prepared);  // writes every input once; the timed runs reuse them
  r.kernel = backend_.kernel_name(timed.c, *prepared);

  cpu::CpuBackend cpu;
  std::vector<float> got, want;
  if (spec.checked_shape.empty()) {
    got = timed.c.read(*backend, *prepared, timed.out);
    want = timed.c.run_once(cpu, timed.out);
  } else {
    Built small = spec.build(true);
    auto checker = backend_.create(spec);
    got = small.c.run_once(*checker, small.out);
    want = small.c.run_once(cpu, small.out);
    if (options_.validation) check_validation_log(backend_, *checker);
    r.checked = spec.checked_shape;
  }
  GRETA_CHECK(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  r.nmse = den > 0 ? num / den : num;
  const bool f16_operands = r.kernel.find("coopmat") != std::string::npos || r.kernel.find("mma") != std::string::npos;
  double limit = f16_operands ? std::max(spec.nmse_limit, kF16OperandsNmse) : spec.nmse_limit;
  if (r.kernel.find("matvec_q8") != std::string::npos || r.kernel.find("coopmat_q8") != std::string::npos) limit = std::max(limit, kInt8ActivationsNmse);
  if (!(r.nmse <= limit))
    fail(spec.shape, " ", spec.type, " ", r.kernel, ": NMSE ", number(r.nmse, "%.3g"), " against the CPU exceeds ",
         number(limit, "%.0e"), " (checked ", r.checked, "); not timing it");

  backend->set_profiling(true);
  const engine::StepArrays arrays =
      timed.c.step ? *timed.c.step : engine::single_sequence_step(timed.c.plan, timed.c.tokens, timed.c.start_pos);
  const engine::StepInput step = arrays.view();
  // --cold-l2: each run finds the last-level cache holding other data (the wall-clock fallback then times the
  // flushes too; the GPU timer does not).
  std::optional<engine::CacheFlush> flush;
  if (options_.cold_l2) flush.emplace(*backend);
  for (int i = 0; i < options_.warmup; ++i) backend->execute(*prepared, step);
  auto& seconds = prepared->mutable_op_seconds();
  std::fill(seconds.begin(), seconds.end(), 0.0);
  const auto start = std::chrono::steady_clock::now();
  double wall = 0;
  while (r.reps < options_.iterations) {
    if (flush) flush->run();
    backend->execute(*prepared, step);
    ++r.reps;
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r.reps >= 3 && wall > options_.max_seconds) break;
  }
  double gpu = 0;
  for (double s : seconds) gpu += s;
  r.gpu_timer = gpu > 0;
  r.seconds = (r.gpu_timer ? gpu : wall) / r.reps;
  if (options_.validation) check_validation_log(backend_, *backend);
  return r;
}

Result OpBench::unavailable(const OpSpec& spec, const std::string& kernel) const {
  Result r = blank_row(spec);
  r.kernel = kernel;
  r.checked = "n/a";
  return r;
}

void OpBench::print() const {
  std::vector<std::string> extra;  // the bench's columns, in order of first appearance
  for (const Result& r : results_)
    for (const Column& c : r.columns)
      if (std::find(extra.begin(), extra.end(), c.name) == extra.end()) extra.push_back(c.name);
  auto value = [](const Result& r, const std::string& name) {
    for (const Column& c : r.columns)
      if (c.name == name) return c.value;
    return kNaN;
  };
  if (options_.json) {
    std::printf("{\"bench\": \"%s\", \"device\": \"%s\", \"device_index\": %u, \"driver\": \"%s\", \"iterations\": %d, "
                "\"warmup\": %d, \"max_seconds\": %g, \"results\": [",
                name_.c_str(), json_escape(backend_.device).c_str(), unsigned(backend_.index),
                json_escape(backend_.driver).c_str(), options_.iterations, options_.warmup,
                options_.max_seconds);
    for (size_t i = 0; i < results_.size(); ++i) {
      const Result& r = results_[i];
      std::printf("%s\n  {\"shape\": \"%s\", \"type\": \"%s\", \"kernel\": \"%s\", \"checked\": \"%s\", \"nmse\": %s, "
                  "\"us\": %s, \"reps\": %d, \"timer\": \"%s\"",
                  i ? "," : "", r.shape.c_str(), r.type.c_str(), json_escape(r.kernel).c_str(),
                  json_escape(r.checked).c_str(), json_number(r.nmse).c_str(), json_number(r.seconds * 1e6).c_str(),
                  r.reps, !r.timed() ? "n/a" : r.gpu_timer ? "gpu" : "wall");
      for (const std::string& name : extra)
        std::printf(", \"%s\": %s", json_escape(name).c_str(), json_number(value(r, name)).c_str());
      std::printf("}");
    }
    std::printf("],\n \"notes\": [");
    for (size_t i = 0; i < notes_.size(); ++i) std::printf("%s\"%s\"", i ? ", " : "", json_escape(notes_[i]).c_str());
    std::printf("]}\n");
    return;
  }
  std::printf("%s on [%u] %s (%s), up to %d runs per case (%g s) after %d warm-up\n", name_.c_str(),
              unsigned(backend_.index), backend_.device.c_str(), backend_.driver.c_str(), options_.iterations,
              options_.max_seconds, options_.warmup);
  // Every cell as text, then columns as wide as their widest cell.
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> header = {"shape", "type", "kernel", "checked", "NMSE", "us", "runs"};
  header.insert(header.end(), extra.begin(), extra.end());
  table.push_back(header);
  for (const Result& r : results_) {
    std::vector<std::string> row = {r.shape, r.type, r.kernel, r.checked, number(r.nmse, "%.1e"),
                                    number(r.seconds * 1e6, "%.1f") + (r.timed() && !r.gpu_timer ? " (wall)" : ""),
                                    r.timed() ? std::to_string(r.reps) : "n/a"};
    for (const std::string& name : extra) row.push_back(cell(value(r, name)));
    table.push_back(row);
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : table)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : table) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - row[i].size(), ' ');
      line += i < 4 ? row[i] + pad + "  " : pad + row[i] + "  ";  // text left, numbers right
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  }
  for (const auto& n : notes_) std::printf("note: %s\n", n.c_str());
}

engine::WeightId repeated_weight(engine::OpCase& c, const std::string& name, model::GgmlType type, int64_t rows,
                                 int64_t cols, uint32_t seed, int64_t period) {
  const uint64_t rb = model::row_bytes(type, uint64_t(cols));
  std::vector<uint8_t> bytes(rb * uint64_t(rows));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> values(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    if (r < period) {
      for (auto& v : values) v = dist(rng);
      model::quantize_row(type, values.data(), bytes.data() + uint64_t(r) * rb, cols);
    } else {
      std::memcpy(bytes.data() + uint64_t(r) * rb, bytes.data() + uint64_t(r % period) * rb, rb);
    }
  }
  c.weight_bytes.push_back(std::move(bytes));
  c.weights.push_back({name, type, rows, cols, nullptr, rb * uint64_t(rows)});
  return engine::WeightId(c.weights.size() - 1);
}

std::vector<model::GgmlType> parse_types(const std::string& list) {
  std::vector<model::GgmlType> out;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    const auto t = model::type_from_name(item);
    if (!t || !model::can_quantize(*t)) fail("--types: unknown or unsupported weight type '", item, "'");
    out.push_back(*t);
  }
  if (out.empty()) fail("--types: no types given");
  return out;
}

namespace {
Built attention_case(const AttentionShape& s) {
  engine::OpCase c(s.n_tokens, s.ctx);  // one sequence on pages 1, 2, ... of the paged cache
  c.start_pos = s.start;
  const engine::KvLayout& kv = c.plan.shape.kv;
  const int64_t kv_width = s.kv_heads * s.head_dim, q_elems = s.n_tokens * s.heads * s.head_dim;
  const int64_t rows = kv.cache_rows();
  const engine::BufferId q = c.input("q", q_elems, 1);
  const engine::BufferId k = c.input("k_cache", rows * kv_width, 2, 1.f, s.kv_type);
  const engine::BufferId v = c.input("v_cache", rows * kv_width, 3, 1.f, s.kv_type);
  const engine::BufferId out = c.output("attn", q_elems);
  c.add("attention", engine::AttentionOp{q, k, v, c.plan.positions, c.seq, c.page_table, out, s.n_tokens, s.heads,
                                         s.kv_heads, s.head_dim, s.head_dim, c.plan.shape.n_seqs, kv.page_size,
                                         kv.pages_per_seq, rows, 1.f / std::sqrt(float(s.head_dim))});
  return {std::move(c), out};
}
}  // namespace

OpSpec attention_spec(const AttentionShape& s, std::string shape_label) {
  constexpr int64_t k_check_tokens = 16;
  OpSpec spec;
  spec.shape = std::move(shape_label);
  spec.type = engine::elem_type_name(s.kv_type);  // the KV cache's
  AttentionShape checked = s;
  if (s.n_tokens > 64) {
    checked.n_tokens = k_check_tokens;
    checked.start = s.start + s.n_tokens - k_check_tokens;
    spec.checked_shape = cat("last ", k_check_tokens, " tokens");
  }
  spec.build = [=](bool check) { return attention_case(check ? checked : s); };
  return spec;
}

double attended_keys(const AttentionShape& s) {
  const double first = double(s.start) + 1, last = double(s.start + s.n_tokens);
  return (first + last) * double(s.n_tokens) / 2;
}

double kv_bytes(const AttentionShape& s) {
  return double(s.start + s.n_tokens) * double(s.kv_heads * s.head_dim) * 2 * double(engine::elem_bytes(s.kv_type, 1));
}

namespace {
// The HIP backend's kernel for the case's only op, by its selection rule (hip_backend.h, hip_backend.hip use_gemm,
// use_flash_attention): the plugin does not report the kernel it launched.
std::string hip_kernel(const engine::OpCase& c, bool matrix_cores) {
  GRETA_CHECK(c.plan.ops.size() == 1);
  return std::visit(
      [&](const auto& o) -> std::string {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, engine::MatMulOp>) {
          const model::GgmlType type = c.weights[size_t(o.weight)].type;
          const bool gemm = matrix_cores && type != model::GgmlType::F32 && o.n_tokens > 8;  // kMatvecTokens
          return cat(gemm ? "gemm_mma_" : "matvec_", model::type_name(type));
        } else if constexpr (std::is_same_v<T, engine::AttentionOp>) {
          const bool flash = matrix_cores && o.n_tokens >= 16 && o.head_dim <= 256 && o.head_dim_v <= 256;
          return flash ? "attention_flash_mma" : "attention_splitk";
        } else {
          return c.plan.ops[0].label;
        }
      },
      c.plan.ops[0].op);
}
}  // namespace

std::optional<BenchBackend> hip_backend(const char* name, const OpBenchOptions& options, bool require_device,
                                        GretaHipDeviceInfo& info) {
  hip::PluginInfo plugin;
  try {
    plugin = hip::load_plugin();
    const auto devices = hip::list_devices();
    const int index = options.device < 0 ? 0 : options.device;
    if (devices.empty()) fail("the plugin ", plugin.path, " loaded but the runtime lists no GPU");
    if (index >= int(devices.size())) fail("device index ", index, " is out of range: ", devices.size(), " found");
    info = devices[size_t(index)];
  } catch (const Error& e) {
    if (require_device) fail("no HIP device (", e.what(), ")");
    std::printf("%s: no HIP device (%s)\n", name, e.what());
    return std::nullopt;
  }
  BenchBackend b;
  b.device = cat(info.name, " (", info.platform, " ", info.arch, ")");
  b.driver = cat("HIP plugin ", plugin.path, ", ", plugin.targets);
  b.index = info.index;
  b.create = [index = info.index](const OpSpec&) {
    return hip::create_backend(index, 0, hip::graphs_from_environment());
  };
  b.kernel_name = [mma = info.matrix_cores != 0](const engine::OpCase& c, const engine::PreparedPlan&) {
    return hip_kernel(c, mma);
  };
  b.ceiling_column = "% peak BW";
  b.ceiling = [gbps = info.memory_gbps](const OpBenchOptions&) {
    return BenchBackend::Ceiling{
        gbps, cat("% peak BW: fraction of the peak memory bandwidth the HIP plugin reports (GretaHipDeviceInfo"
                  "::memory_gbps, memory clock x bus width: ", number(gbps, "%.0f"),
                  " GB/s), not a measured copy: the plugin exposes no copy kernel")};
  };
  return b;
}

std::unique_ptr<OpBench> open_bench(BenchTarget target, const char* name, const OpBenchOptions& options,
                                    const cli::Args& args, GretaHipDeviceInfo& hip_info) {
  if (target == BenchTarget::vulkan) return std::make_unique<OpBench>(name, options);
  auto backend = hip_backend(name, options, args.has("require-device"), hip_info);
  if (!backend) return nullptr;
  return std::make_unique<OpBench>(name, options, std::move(*backend));
}

OpSpec gemm_spec(model::GgmlType type, int64_t m, int64_t n, int64_t k) {
  constexpr int64_t k_check_m = 64, k_check_n = 256;
  OpSpec spec;
  spec.shape = shape_name({m, n, k});
  spec.type = model::type_name(type);
  if (m > k_check_m || n > k_check_n)
    spec.checked_shape = shape_name({std::min(m, k_check_m), std::min(n, k_check_n), k});
  spec.build = [=](bool checked) {
    const int64_t tokens = checked ? std::min(m, k_check_m) : m, rows = checked ? std::min(n, k_check_n) : n;
    const bool small = tokens <= k_check_m && rows <= k_check_n;  // validated: random rows throughout
    engine::OpCase c(tokens, tokens);
    const engine::BufferId x = c.input("x", tokens * k, 1);
    const engine::BufferId y = c.output("y", tokens * rows);
    const engine::WeightId w = small ? c.weight("w", type, rows, k, 2) : repeated_weight(c, "w", type, rows, k, 2);
    c.add("matmul", engine::MatMulOp{x, y, w, tokens, k, rows});
    return Built{std::move(c), y};
  };
  return spec;
}

}  // namespace greta::bench
