// vk_gemm_bench: the prefill matmul out[M, N] = x[M, K] * W[N, K]^T (M tokens, N weight rows, K columns) on each
// matrix-matrix kernel: matmul_tiled (scalar f32, shared-memory tiles) and matmul_coopmat (16x16x16 f16 cooperative
// matrices; "n/a" where the device or the build lacks them). TFLOP/s = 2MNK / time; "% peak" against --peak-tflops
// when given; "% best" against the fastest kernel at the same shape and type. Cases of more than 64 tokens or 256
// rows are checked against the CPU at M <= 64, N <= 256 with the full K (see op_bench.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "model/quants.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;
using model::GgmlType;

namespace {

const cli::OptionSpec k_options[] = {
    {"mnk", "s", true,
     "comma-separated MxNxK: M tokens, N weight rows, K columns (default "
     "512x4096x4096,512x11008x4096,512x4096x11008,4096x4096x4096; --quick 64x256x512)"},
    {"types", "t", true, "comma-separated weight types (default f16,q4_0,q4_k,q8_0)"},
    {"kernels", "k", true, "comma-separated kernels to time: tiled, coopmat (default both)"},
    {"peak-tflops", nullptr, true, "the device's peak TFLOP/s (for the kernel's precision) for the % peak column"},
};

struct Kernel {
  const char* name;
  vk::MatmulKernel kernel;
};
constexpr Kernel k_kernels[] = {{"tiled", vk::MatmulKernel::tiled}, {"coopmat", vk::MatmulKernel::coopmat}};

OpSpec gemm_spec(GgmlType type, int64_t m, int64_t n, int64_t k, vk::MatmulKernel kernel) {
  OpSpec spec = bench::gemm_spec(type, m, n, k);
  spec.kernel = kernel;
  return spec;
}

// Why the cooperative-matrix kernel cannot run `type` here; empty when it can (a small case prepared with it).
std::string coopmat_missing(OpBench& bench, GgmlType type) {
  Built probe = gemm_spec(type, 64, 64, model::traits(type).block_elems == 256 ? 256 : 64, vk::MatmulKernel::coopmat)
                    .build(true);
  vk::VkBackendOptions o;
  o.device = bench.options().device;
  o.matmul = vk::MatmulKernel::coopmat;
  o.switches = vk::ExperimentSwitches::from_environment();
  try {
    auto backend = vk::create_vk_backend(o);
    probe.c.load_and_prepare(*backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, "vk_gemm_bench",
                                     "Prefill matmul per kernel: TFLOP/s, % of --peak-tflops, % of the best kernel.",
                                     k_options, options);
  if (!args) return 0;
  OpBench bench("vk_gemm_bench", options);
  const char* default_mnk =
      bench.small_shapes() ? "64x256x512" : "512x4096x4096,512x11008x4096,512x4096x11008,4096x4096x4096";
  const auto shapes = parse_shapes(args->get("mnk", default_mnk), 3, "mnk");
  const auto types = parse_types(args->get("types", "f16,q4_0,q4_k,q8_0"));
  std::vector<Kernel> kernels;
  std::stringstream kernel_list(args->get("kernels", "tiled,coopmat"));
  for (std::string name; std::getline(kernel_list, name, ',');) {
    const auto it = std::find_if(std::begin(k_kernels), std::end(k_kernels),
                                 [&](const Kernel& k) { return name == k.name; });
    if (it == std::end(k_kernels)) fail("--kernels: unknown kernel '", name, "' (expected tiled or coopmat)");
    kernels.push_back(*it);
  }
  if (kernels.empty()) fail("--kernels: no kernels given");
  const double peak = args->get_double("peak-tflops", 0);
  if (peak < 0) fail("--peak-tflops must be positive");

  std::map<GgmlType, std::string> coopmat_reason;
  if (!bench.device().supports_coopmat(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR)) {
    for (GgmlType type : types) coopmat_reason[type] = "no 16x16x16 f16 cooperative matrices";
    bench.note("matmul_coopmat: n/a (the device has no 16x16x16 f16 cooperative matrices)");
  } else {
    for (GgmlType type : types) {
      coopmat_reason[type] = coopmat_missing(bench, type);
      if (!coopmat_reason[type].empty())
        bench.note(cat("matmul_coopmat ", model::type_name(type), ": n/a (", coopmat_reason[type], ")"));
    }
  }
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
      const size_t first = bench.results().size();
      for (const Kernel& kernel : kernels) {
        const OpSpec spec = gemm_spec(type, m, n, k, kernel.kernel);
        if (kernel.kernel == vk::MatmulKernel::coopmat && !coopmat_reason[type].empty()) {
          bench.add(bench.unavailable(spec, cat("matmul_", kernel.name, " n/a")));
          continue;
        }
        Result r = bench.run(spec);
        const double tflops = 2.0 * double(m) * double(n) * double(k) / r.seconds * 1e-12;
        r.columns = {{"TFLOP/s", tflops}};
        if (peak > 0) r.columns.push_back({"% peak", 100.0 * tflops / peak});
        bench.add(std::move(r));
      }
      double best = 0;  // "% best" within this shape and type
      for (size_t i = first; i < bench.results().size(); ++i)
        if (bench.results()[i].timed()) best = std::max(best, bench.results()[i].columns[0].value);
      for (size_t i = first; i < bench.results().size(); ++i) {
        Result& r = bench.results()[i];
        r.columns.push_back({"% best", r.timed() ? 100.0 * r.columns[0].value / best : kNaN});
      }
    }
  }
  if (peak <= 0) bench.note("pass --peak-tflops T (the device's peak for the kernel's precision) for a % peak column");
  bench.note("timed matrices of more than 64 tokens or 256 rows repeat 61 random weight rows (the values do not "
             "change the speed); the checked column names the shape validated against the CPU");
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_gemm_bench", run, argc, argv); }
