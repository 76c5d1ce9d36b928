// Shared pieces of the Vulkan micro-benchmarks: options (--device, --json, --sizes, --iters, --warmup), GPU timing
// of a recorded sequence, and table / JSON output.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "args.h"
#include "vk/commands.h"
#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipelines.h"

namespace greta::bench {

struct BenchOptions {
  int device = -1;
  bool json = false;
  bool validation = false;
  std::vector<uint64_t> sizes;  // bytes
  int iterations = 20;
  int warmup = 3;
};

// Parses the common options; returns false when --help was printed.
bool parse_options(int argc, char** argv, const char* name, const char* what, const char* default_sizes_mib,
                   BenchOptions& out);

// The options every bench takes (--device --json --iters --warmup --validation), for benches with option lists of
// their own (op_bench.cpp), and reading them from parsed arguments.
std::span<const cli::OptionSpec> shared_option_specs();
void read_shared_options(const cli::Args& args, BenchOptions& out);

std::unique_ptr<vk::Context> open_context(const BenchOptions& options);

// main() of a bench: runs `run`, prints "NAME: error: MESSAGE" and returns 1 on any exception.
int bench_main(const char* name, int (*run)(int, char**), int argc, char** argv);

struct Timing {
  double median_ns = 0;
  double min_ns = 0;
  bool gpu_timer = true;  // false: wall clock around submit + wait (the queue has no timestamps)
};

// Submits `seq` warmup + iterations times; each iteration's time is the span from the first timed operation's start
// to the last one's end (GPU timestamps), or the wall-clock time of submit + wait without timestamps.
Timing measure(vk::RecordedSequence& seq, const BenchOptions& options);

struct Row {
  std::string method;
  uint64_t bytes = 0;        // buffer size
  uint64_t moved_bytes = 0;  // bytes counted for bandwidth (read + write for copies)
  Timing timing;
  double gbps() const { return timing.median_ns > 0 ? double(moved_bytes) / timing.median_ns : 0.0; }
};

void print_results(const std::string& bench, const vk::Context& context, const BenchOptions& options,
                   const std::vector<Row>& rows, const std::vector<std::string>& notes);

std::string json_escape(const std::string& s);

// The copy_u32x4 shader copy of `bytes` (a multiple of 16) from src to dst, in windows the device can bind: the
// streaming ceiling of a compute kernel (vk_copy_bench; the op benches' "% copy").
const vk::ComputePipeline& copy_pipeline(vk::Pipelines& pipelines);
void record_shader_copy(vk::Recorder& r, const vk::Context& ctx, const vk::ComputePipeline& copy, const vk::Buffer& src,
                        const vk::Buffer& dst, uint64_t bytes);
// Times the shader copy of `bytes` between two fresh device buffers; GB/s = (read + write) / median time.
Row measure_shader_copy(vk::Context& ctx, uint64_t bytes, const BenchOptions& options);

// Option lists: "512,1024" -> {512, 1024}; "4096x4096,11008x4096" -> {{4096, 4096}, {11008, 4096}} with `dims`
// positive numbers per item. Failures name the option (--OPTION).
std::vector<int64_t> parse_ints(const std::string& list, const char* option);
std::vector<std::vector<int64_t>> parse_shapes(const std::string& list, size_t dims, const char* option);
std::string shape_name(std::initializer_list<int64_t> dims);  // {512, 4096} -> "512x4096"

// Deterministic pseudo-random words, fast enough for hundreds of MiB.
std::vector<uint32_t> pattern_words(size_t count, uint64_t seed);

}  // namespace greta::bench
