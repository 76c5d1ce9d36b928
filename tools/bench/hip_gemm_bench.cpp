// hip_gemm_bench: vk_gemm_bench on the HIP backend (docs/hip.md): the prefill matmul out[M, N] = x[M, K] * W[N, K]^T
// (M tokens, N weight rows, K columns) on the matrix-core GEMM (fp16 operands, fp32 accumulation; MFMA/WMMA on AMD,
// mma.sync in the nvcc build), weights dequantized in-kernel. TFLOP/s = 2MNK / time, including the kernel that
// converts the activations to fp16; "% peak" against --peak-tflops, by default the fp16 matrix-core peak the plugin
// reports (GretaHipDeviceInfo::peak_fp16_tflops, approximate). Cases of more than 64 tokens or 256 rows are checked
// against the CPU at M <= 64, N <= 256 with the full K (see op_bench.h). Without a HIP device: one line
// "hip_gemm_bench: no HIP device (...)", exit 0 (exit 1 with --require-device).
#include <cstdio>

#include "core/error.h"
#include "model/quants.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;
using model::GgmlType;

namespace {

constexpr const char* k_name = "hip_gemm_bench";

const cli::OptionSpec k_options[] = {
    {"mnk", "s", true,
     "comma-separated MxNxK: M tokens, N weight rows, K columns (default "
     "512x4096x4096,512x11008x4096,512x4096x11008,4096x4096x4096; --quick 64x256x512)"},
    {"types", "t", true, "comma-separated weight types (default f16,q4_0,q4_k,q8_0)"},
    {"peak-tflops", nullptr, true, "the % peak reference in TFLOP/s (default: the plugin's fp16 matrix-core peak)"},
    k_require_device_option,
};

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, k_name,
                                     "Prefill matmul on the HIP backend's matrix-core GEMM: TFLOP/s, % of peak.",
                                     k_options, options);
  if (!args) return 0;
  GretaHipDeviceInfo info{};
  auto backend = hip_backend(k_name, options, args->has("require-device"), info);
  if (!backend) return 0;
  OpBench bench(k_name, options, std::move(*backend));
  const char* default_mnk =
      bench.small_shapes() ? "64x256x512" : "512x4096x4096,512x11008x4096,512x4096x11008,4096x4096x4096";
  const auto shapes = parse_shapes(args->get("mnk", default_mnk), 3, "mnk");
  const auto types = parse_types(args->get("types", "f16,q4_0,q4_k,q8_0"));
  const bool given_peak = args->has("peak-tflops");
  const double peak = given_peak ? args->get_double("peak-tflops", 0) : info.peak_fp16_tflops;
  if (given_peak && !(peak > 0)) fail("--peak-tflops must be positive");
  if (!info.matrix_cores) bench.note("the plugin has no matrix-core kernels for this device: every case runs the matvec");

  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    if (n < 2) fail("--mnk: N must be >= 2");
    for (GgmlType type : types) {
      const int64_t block = model::traits(type).block_elems;
      if (k % block != 0) {
        bench.note(cat("skipped ", model::type_name(type), " at ", shape_name({m, n, k}), ": K must be a multiple of ",
                       block));
        continue;
      }
      Result r = bench.run(gemm_spec(type, m, n, k));  // mma kernels are held to kF16OperandsNmse
      const double tflops = 2.0 * double(m) * double(n) * double(k) / r.seconds * 1e-12;
      r.columns = {{"TFLOP/s", tflops}, {"% peak", peak > 0 ? 100.0 * tflops / peak : kNaN}};
      bench.add(std::move(r));
    }
  }
  if (given_peak)
    bench.note(cat("% peak: fraction of --peak-tflops ", peak));
  else
    bench.note(cat("% peak: fraction of the fp16 dense matrix-core peak the HIP plugin reports (GretaHipDeviceInfo"
                   "::peak_fp16_tflops, clock x units x per-unit rate, approximate: ",
                   peak, " TFLOP/s); not measured"));
  bench.note("timed matrices of more than 64 tokens or 256 rows repeat 61 random weight rows (the values do not "
             "change the speed); the checked column names the shape validated against the CPU");
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main(k_name, run, argc, argv); }
