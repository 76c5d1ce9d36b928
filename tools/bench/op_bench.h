// Shared machinery of the kernel benchmarks (vk_matvec_bench, vk_gemm_bench, vk_attention_bench, vk_rmsnorm_bench,
// vk_rope_bench, vk_softmax_bench; hip_matvec_bench, hip_gemm_bench, hip_attention_bench), in the style of llm.c's
// kernel lab: every case is an engine::OpCase of one op.
//   1. validate: the case (or, for shapes too big for the CPU reference, a smaller case of the same kind, named in the
//      table's "checked" column) runs on the CPU backend and on the GPU backend; NMSE = sum (gpu - cpu)^2 / sum cpu^2
//      of the output must stay within the limits of the backend's op tests, else the bench fails with one line;
//   2. time: the full-size case on the GPU backend with profiling on (GPU timestamps or events summed per op,
//      PreparedPlan::op_seconds), after warm-up; the mean over the repetitions is reported.
// Each bench turns the time into its figure of merit (GB/s, TFLOP/s, ...) and the fraction of a ceiling: on Vulkan
// the shader copy bandwidth measured in the same run (bench_common: measure_shader_copy); on HIP the peak memory
// bandwidth the plugin reports (GretaHipDeviceInfo: the plugin exposes no copy to measure); a peak given on the
// command line; or the best kernel. The GPU backend is a BenchBackend: the Vulkan one unless a bench passes another.
#pragma once
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "args.h"
#include "bench_common.h"
#include "engine/op_case.h"
#include "hip/plugin_api.h"
#include "model/tensor_types.h"
#include "vk/backend/vk_backend.h"

namespace greta::bench {

inline constexpr double kNaN = NAN;  // a table cell that does not apply: printed "n/a", JSON null

struct OpBenchOptions : BenchOptions {
  bool quick = false;        // --quick: small shapes (seconds on lavapipe; the CTest smoke test)
  double max_seconds = 1.0;  // stop repeating a case after this much wall time (at least 3 repetitions)
  uint64_t copy_bytes = 0;   // the copy-ceiling buffer; 0: 256 MiB (beyond GPU caches), 16 MiB with small shapes
  bool cold_l2 = false;      // --cold-l2: the last-level cache evicted before every timed run
};

// Parses the shared options (--device --json --iters --warmup --validation --quick --max-time --copy-mib --cold-l2
// --help) and `extra`; the bench reads its own options from the result. nullopt: --help was printed.
std::optional<cli::Args> parse_op_options(int argc, char** argv, const char* name, const char* what,
                                          std::span<const cli::OptionSpec> extra, OpBenchOptions& out);

// One case: the op to time and the (possibly smaller) one checked against the CPU.
struct Built {
  engine::OpCase c;
  engine::BufferId out;  // compared with the CPU
};
struct OpSpec {
  std::string shape, type;                      // table columns
  std::function<Built(bool checked)> build;     // build(false): the timed case; build(true): the validated one
  std::string checked_shape;                    // empty: build(true) == build(false), validated as timed
  double nmse_limit = 1e-9;  // raised to kF16OperandsNmse when the kernel that ran has f16 operands (coopmat, mma)
  vk::MatmulKernel kernel = vk::MatmulKernel::automatic;
};

// The GPU backend a bench times, as functions (OpBench(name, options) builds the Vulkan one; hip_backend() the HIP
// one). `ceiling` is called at most once, on first use of the bandwidth ceiling.
struct BenchBackend {
  std::string device, driver;  // table header and JSON: "NVIDIA H100 80GB HBM3", "NVIDIA 580.159.04"
  int index = 0;
  bool cpu_device = false;     // a CPU device (lavapipe): the small shapes by default
  std::function<std::unique_ptr<engine::Backend>(const OpSpec&)> create;
  // The kernel that runs the case's only op ("matvec_q4_0").
  std::function<std::string(const engine::OpCase&, const engine::PreparedPlan&)> kernel_name;
  // Messages of a validation layer, when options().validation; may be empty (none).
  std::function<std::vector<std::string>(const engine::Backend&)> validation_messages;
  std::string ceiling_column = "% copy";  // the column percent_of_copy() fills
  struct Ceiling {
    double gbps;
    std::string note;  // what the ceiling is, printed under the table
  };
  std::function<Ceiling(const OpBenchOptions&)> ceiling;
};

// The limit for kernels that round their operands to f16 (cooperative-matrix / MMA GEMM and attention), as in
// tests/vk/vk_ops_test.cpp and tests/hip: OpBench::run applies it when the kernel's name says coopmat or mma.
inline constexpr double kF16OperandsNmse = 2e-6;
// The limit for the int8-activation decode matvecs (matvec_q8_<type>), as in tests/vk/vk_ops_test.cpp:
// OpBench::run applies it when the kernel's name says matvec_q8.
inline constexpr double kInt8ActivationsNmse = 2e-4;

struct Column {
  std::string name;  // "GB/s", "% copy"
  double value;      // kNaN: n/a
};

struct Result {
  std::string shape, type, kernel, checked = "as timed";
  double nmse = kNaN, seconds = kNaN;  // seconds: mean per run; kNaN when the kernel is not available
  int reps = 0;
  bool gpu_timer = true;
  std::vector<Column> columns;
  bool timed() const { return seconds > 0; }
};

class OpBench {
public:
  OpBench(std::string name, const OpBenchOptions& options);  // on the Vulkan backend (options.device)
  OpBench(std::string name, const OpBenchOptions& options, BenchBackend backend);
  ~OpBench();

  const OpBenchOptions& options() const { return options_; }
  // Whether the bench's default shapes are the small ones: with --quick, and on a CPU Vulkan device (lavapipe),
  // where the GPU-sized defaults would take minutes (a note says so; shapes named on the command line still apply).
  bool small_shapes() const { return small_shapes_; }
  const vk::DeviceInfo& device() const;  // the Vulkan benches only
  // The bandwidth ceiling (GB/s, read + write): on Vulkan the shader copy of options().copy_bytes, measured on
  // first use; on HIP the plugin's peak figure.
  double copy_gbps();
  // "% copy" (HIP: "% peak BW") of a bandwidth (kNaN stays kNaN).
  Column percent_of_copy(double gbps);
  const std::string& ceiling_column() const { return backend_.ceiling_column; }

  // Validates and times one case. Throws greta::Error when the NMSE exceeds the limit.
  Result run(const OpSpec& spec);
  // A row for a kernel the device or the build does not have.
  Result unavailable(const OpSpec& spec, const std::string& kernel) const;

  void add(Result r) { results_.push_back(std::move(r)); }
  std::vector<Result>& results() { return results_; }
  void note(std::string n) { notes_.push_back(std::move(n)); }
  void print() const;  // the table, or JSON with --json

private:
  void init();
  std::string name_;
  OpBenchOptions options_;
  std::unique_ptr<vk::Context> context_;  // Vulkan: device facts and the copy ceiling; the backends open their own
  BenchBackend backend_;
  bool small_shapes_ = false;
  double copy_gbps_ = 0;
  std::vector<Result> results_;
  std::vector<std::string> notes_;
};

// A [rows, cols] weight for timing: `period` random rows encoded with the reference quantizer, repeated to fill the
// matrix (values do not change a kernel's speed; quantizing millions of rows would dominate the run).
engine::WeightId repeated_weight(engine::OpCase& c, const std::string& name, model::GgmlType type, int64_t rows,
                                 int64_t cols, uint32_t seed, int64_t period = 61);

// "f16,q4_0,q4_k" -> the types (case-insensitive, ggml's names); fails naming an unknown one.
std::vector<model::GgmlType> parse_types(const std::string& list);

// The attention op at positions start .. start + n_tokens - 1 of one sequence over a random paged cache of ctx
// positions (pages 1, 2, ...; kv_type F32 or F16), as a bench case (vk_attention_bench, vk_softmax_bench). Cases of
// more than 64 tokens are checked against the CPU on their last 16 tokens (the longest rows); smaller ones as timed.
// The limit is the f32-reduction one, 1e-9 (the CPU reference stores an F16 cache as f16 too).
struct AttentionShape {
  int64_t n_tokens, start, ctx, heads, kv_heads, head_dim;
  engine::ElemType kv_type = engine::ElemType::F32;
};
OpSpec attention_spec(const AttentionShape& s, std::string shape_label);
double attended_keys(const AttentionShape& s);  // sum over the tokens of (position + 1)
double kv_bytes(const AttentionShape& s);       // K and V rows 0 .. last position: each read at least once

// The HIP backend of device options.device (-1: 0) through the plugin loader (hip_loader.h), with `info` filled in;
// nullopt after printing "NAME: no HIP device (WHY)" when the plugin does not load or sees no device, unless
// `require_device`, which throws instead. Kernel names follow the HIP backend's documented selection
// (hip_backend.h); the ceiling is the plugin's memory_gbps.
std::optional<BenchBackend> hip_backend(const char* name, const OpBenchOptions& options, bool require_device,
                                        GretaHipDeviceInfo& info);
inline const cli::OptionSpec k_require_device_option = {
    "require-device", nullptr, false,
    "HIP benches: fail (exit 1) without a HIP device instead of printing one line, exit 0"};

// Which backend a kernel bench times. The matvec and attention benches are one source each, built twice
// (vk_*_bench and hip_*_bench, GRETA_BENCH_HIP = 0 / 1 in tools/bench/CMakeLists.txt).
enum class BenchTarget { vulkan, hip };
// The bench on `target`; for HIP, `hip_info` receives the device's facts and nullptr comes back after
// "NAME: no HIP device (...)" when there is none (an error with --require-device).
std::unique_ptr<OpBench> open_bench(BenchTarget target, const char* name, const OpBenchOptions& options,
                                    const cli::Args& args, GretaHipDeviceInfo& hip_info);

// The prefill matmul out[m, n] = x[m, k] * W[n, k]^T of `type`; cases of more than 64 tokens or 256 rows are
// checked against the CPU at m <= 64, n <= 256 with the full k.
OpSpec gemm_spec(model::GgmlType type, int64_t m, int64_t n, int64_t k);

}  // namespace greta::bench
