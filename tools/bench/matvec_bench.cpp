// vk_matvec_bench / hip_matvec_bench (one source, GRETA_BENCH_HIP = 0 / 1): the decode matmul (one token:
// out[r] = dot(weight row r, x); with --tokens N, the N tokens of a batched decode step at once) for every weight
// type, on the matvec kernel. GB/s = weight bytes / time (the activations, (rows + cols) * 4 bytes per token, are not
// counted), and its fraction of the bandwidth ceiling: on Vulkan the shader copy measured in the same run (read +
// write), on HIP the peak memory bandwidth the plugin reports (GretaHipDeviceInfo::memory_gbps; the plugin exposes
// no copy to measure). See op_bench.h for validation and timing; matrices of more than 512 rows are checked against
// the CPU at 512 rows. hip_matvec_bench without a HIP device: one line "hip_matvec_bench: no HIP device (...)", exit
// 0 (exit 1 with --require-device).
#include <cstdio>

#include "core/error.h"
#include "model/quants.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;
using model::GgmlType;

namespace {

constexpr BenchTarget k_target = GRETA_BENCH_HIP ? BenchTarget::hip : BenchTarget::vulkan;
constexpr const char* k_name = GRETA_BENCH_HIP ? "hip_matvec_bench" : "vk_matvec_bench";
constexpr const char* k_all_types = "f32,f16,bf16,q4_0,q4_1,q5_0,q5_1,q8_0,q2_k,q3_k,q4_k,q5_k,q6_k";
constexpr int64_t k_check_rows = 512;

const cli::OptionSpec k_options[] = {
    {"rows", "r", true, "weight rows (output features); with --cols picks one shape (the other defaults to 4096)"},
    {"cols", "c", true, "weight columns (input features)"},
    {"types", "t", true, "comma-separated weight types (default: all 13)"},
    {"tokens", nullptr, true, "comma-separated token counts per matvec (default 1): a batched decode step's"},
    {"kernel", nullptr, true,
     "matvec (default: the decode kernel at every token count) or auto (Vulkan: the backend's choice for the step, "
     "e.g. the int8 cooperative-matrix GEMM of a batched step)"},
    k_require_device_option,
};

OpSpec matvec_spec(GgmlType type, int64_t rows, int64_t cols, int64_t tokens, vk::MatmulKernel kernel) {
  OpSpec spec;
  // "ROWSxCOLS" for one token, "TOKENSxROWSxCOLS" for several.
  const auto name = [tokens, cols](int64_t r) {
    return tokens == 1 ? shape_name({r, cols}) : shape_name({tokens, r, cols});
  };
  spec.shape = name(rows);
  spec.type = model::type_name(type);
  spec.kernel = kernel;  // Vulkan: matvec forces the decode kernel (HIP picks it for one token anyway)
  if (rows > k_check_rows) spec.checked_shape = name(k_check_rows);
  spec.build = [=](bool checked) {
    const int64_t n = checked ? std::min(rows, k_check_rows) : rows;
    engine::OpCase c(tokens, tokens);  // one step of `tokens` tokens
    const engine::BufferId x = c.input("x", tokens * cols, 1);
    const engine::BufferId y = c.output("y", tokens * n);
    // What is validated has random rows throughout; big timed matrices repeat 61 random rows (op_bench.h).
    const engine::WeightId w =
        n <= k_check_rows ? c.weight("w", type, n, cols, 2) : repeated_weight(c, "w", type, n, cols, 2);
    c.add("matvec", engine::MatMulOp{x, y, w, tokens, cols, n});
    return Built{std::move(c), y};
  };
  return spec;
}

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, k_name,
                                     "Decode matmul (1 token, or --tokens) per weight type: GB/s of weights, % of "
                                     "the bandwidth ceiling.",
                                     k_options, options);
  if (!args) return 0;
  GretaHipDeviceInfo hip_info{};
  const auto bench = open_bench(k_target, k_name, options, *args, hip_info);
  if (!bench) return 0;
  std::vector<std::vector<int64_t>> shapes = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}};
  if (bench->small_shapes()) shapes = {{512, 1024}, {256, 2048}};
  if (args->has("rows") || args->has("cols")) shapes = {{args->get_int("rows", 4096), args->get_int("cols", 4096)}};
  const auto types = parse_types(args->get("types", k_all_types));
  const std::vector<int64_t> token_counts = parse_ints(args->get("tokens", "1"), "tokens");
  for (int64_t n : token_counts)
    if (n < 1 || n > 64) fail("--tokens: expected counts 1..64, got ", n);
  const std::string kernel_name = args->get("kernel", "matvec");
  if (kernel_name != "matvec" && kernel_name != "auto") fail("--kernel: expected matvec or auto, got ", kernel_name);
  const vk::MatmulKernel kernel = kernel_name == "auto" ? vk::MatmulKernel::automatic : vk::MatmulKernel::matvec;

  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], cols = shape[1];
    if (rows < 2 || cols < 1) fail("--rows must be >= 2 and --cols >= 1");
    for (GgmlType type : types) {
      const int64_t block = model::traits(type).block_elems;
      if (cols % block != 0) {
        bench->note(cat("skipped ", model::type_name(type), " at ", shape_name({rows, cols}), ": rows of ", block,
                        "-element blocks need cols to be a multiple of ", block));
        continue;
      }
      for (int64_t tokens : token_counts) {
        Result r = bench->run(matvec_spec(type, rows, cols, tokens, kernel));
        const double bytes = double(model::row_bytes(type, uint64_t(cols))) * double(rows);
        const double gbps = bytes / r.seconds * 1e-9;
        r.columns = {{"weights MiB", bytes / 1048576.0}, {"GB/s", gbps}, bench->percent_of_copy(gbps)};
        bench->add(std::move(r));
      }
    }
  }
  if (!options.cold_l2)
    bench->note("GB/s counts the weight bytes read once per run; weights smaller than the GPU's last-level cache may "
                "be served from it across repeated runs, so small matrices can exceed the bandwidth ceiling "
                "(--cold-l2 evicts it before every run)");
  bench->note(cat("timed matrices of more than ", k_check_rows, " rows repeat 61 random rows (the values do not "
                  "change the speed); the checked column names the shape validated against the CPU"));
  bench->print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main(k_name, run, argc, argv); }
