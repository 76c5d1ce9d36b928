// Shared machinery of the kernel benchmarks (vk_matvec_bench, vk_gemm_bench, vk_attention_bench, vk_rmsnorm_bench,
// vk_rope_bench, vk_softmax_bench), in the style of llm.c's kernel lab: every case is an engine::OpCase of one op.
//   1. validate: the case (or, for shapes too big for the CPU reference, a smaller case of the same kind, named in the
//      table's "checked" column) runs on the CPU backend and on the Vulkan backend; NMSE = sum (vk - cpu)^2 / sum cpu^2
//      of the output must stay within the limits of tests/vk/vk_ops_test.cpp, else the bench fails with one line;
//   2. time: the full-size case on the Vulkan backend with profiling on (GPU timestamps summed per op,
//      PreparedPlan::op_seconds), after warm-up; the mean over the repetitions is reported.
// Each bench turns the time into its figure of merit (GB/s, TFLOP/s, ...) and the fraction of a ceiling: the shader
// copy bandwidth measured in the same run (bench_common: measure_shader_copy), a peak given on the command line, or
// the best kernel.
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
#include "model/tensor_types.h"
#include "vk/backend/vk_backend.h"

namespace greta::bench {

inline constexpr double kNaN = NAN;  // a table cell that does not apply: printed "n/a", JSON null

struct OpBenchOptions : BenchOptions {
  bool quick = false;        // --quick: small shapes (seconds on lavapipe; the CTest smoke test)
  double max_seconds = 1.0;  // stop repeating a case after this much wall time (at least 3 repetitions)
  uint64_t copy_bytes = 0;   // the copy-ceiling buffer; 0: 256 MiB (beyond GPU caches), 16 MiB with small shapes
};

// Parses the shared options (--device --json --iters --warmup --validation --quick --max-time --copy-mib --help)
// and `extra`; the bench reads its own options from the result. nullopt: --help was printed.
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
  double nmse_limit = 1e-9;
  vk::MatmulKernel kernel = vk::MatmulKernel::automatic;
};

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
  OpBench(std::string name, const OpBenchOptions& options);
  ~OpBench();

  const OpBenchOptions& options() const { return options_; }
  // Whether the bench's default shapes are the small ones: with --quick, and on a CPU Vulkan device (lavapipe),
  // where the GPU-sized defaults would take minutes (a note says so; shapes named on the command line still apply).
  bool small_shapes() const { return small_shapes_; }
  const vk::DeviceInfo& device() const { return context_->info(); }
  // The shader-copy bandwidth (GB/s, read + write) of options().copy_bytes, measured on first use.
  double copy_gbps();
  // "% copy" of a bandwidth (kNaN stays kNaN).
  Column percent_of_copy(double gbps);

  // Validates and times one case. Throws greta::Error when the NMSE exceeds the limit.
  Result run(const OpSpec& spec);
  // A row for a kernel the device or the build does not have.
  Result unavailable(const OpSpec& spec, const std::string& kernel) const;

  void add(Result r) { results_.push_back(std::move(r)); }
  std::vector<Result>& results() { return results_; }
  void note(std::string n) { notes_.push_back(std::move(n)); }
  void print() const;  // the table, or JSON with --json

private:
  std::unique_ptr<engine::Backend> make_backend(vk::MatmulKernel kernel) const;
  std::string name_;
  OpBenchOptions options_;
  std::unique_ptr<vk::Context> context_;  // device facts and the copy ceiling; the backends open their own
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

// The attention op at positions start .. start + n_tokens - 1 over a random cache of ctx rows, as a bench case
// (vk_attention_bench, vk_softmax_bench). Cases of more than 64 tokens are checked against the CPU on their last 16
// tokens (the longest rows); smaller ones as timed. The limit is the f32-reduction one, 1e-9.
struct AttentionShape {
  int64_t n_tokens, start, ctx, heads, kv_heads, head_dim;
};
OpSpec attention_spec(const AttentionShape& s, std::string shape_label);
double attended_keys(const AttentionShape& s);  // sum over the tokens of (position + 1)
double kv_bytes(const AttentionShape& s);       // K and V rows 0 .. last position: each read at least once

// main() of a bench: runs `run`, prints "NAME: error: MESSAGE" and returns 1 on any exception.
int bench_main(const char* name, int (*run)(int, char**), int argc, char** argv);

}  // namespace greta::bench
