// vk_rmsnorm_bench: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, one workgroup per row, out of place.
// Shapes ROWSxWIDTH: decode (1x4096), prefill (512x4096, 4096x4096) and qwen3's per-head Q/K norm (16384x128 =
// 512 tokens x 32 heads of 128). GB/s = bytes read + written ((2 * rows + 1) * width * 4: x, out, weight) / time;
// "% copy" is that against the shader copy bandwidth measured in the same run (also read + write).
#include <cstdio>

#include "core/error.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;

namespace {

const cli::OptionSpec k_options[] = {
    {"shapes", "s", true,
     "comma-separated ROWSxWIDTH (default 1x4096,512x4096,4096x4096,16384x128; --quick 1x4096,64x1024)"},
};

OpSpec rmsnorm_spec(int64_t rows, int64_t width) {
  OpSpec spec;
  spec.shape = shape_name({rows, width});
  spec.type = "f32";
  spec.build = [=](bool) {
    engine::OpCase c(1, 1);
    const engine::BufferId x = c.input("x", rows * width, 1, 3.f);
    const engine::WeightId w = c.weight("norm", model::GgmlType::F32, 1, width, 2, 0.5f, 1.5f);
    const engine::BufferId out = c.output("y", rows * width);
    c.add("rmsnorm", engine::RmsNormOp{x, out, w, rows, width, 0, 1e-5f});
    return Built{std::move(c), out};
  };
  return spec;
}

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, "vk_rmsnorm_bench",
                                     "RMSNorm: GB/s (read + write), % of copy bandwidth.", k_options, options);
  if (!args) return 0;
  OpBench bench("vk_rmsnorm_bench", options);
  const char* default_shapes = bench.small_shapes() ? "1x4096,64x1024" : "1x4096,512x4096,4096x4096,16384x128";
  const auto shapes = parse_shapes(args->get("shapes", default_shapes), 2, "shapes");
  for (const auto& s : shapes) {
    const int64_t rows = s[0], width = s[1];
    Result r = bench.run(rmsnorm_spec(rows, width));
    const double gbps = double(2 * rows + 1) * double(width) * 4 / r.seconds * 1e-9;
    r.columns = {{"GB/s", gbps}, bench.percent_of_copy(gbps)};
    bench.add(std::move(r));
  }
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_rmsnorm_bench", run, argc, argv); }
