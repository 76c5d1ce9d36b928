// vk_rope_bench: in-place rotary embedding of every head (rope dims = head dim), both pairings (adjacent pairs as
// llama, halves as neox/qwen), base 10000. Shapes TOKENSxHEADSxHEAD_DIM: decode Q (1x32x128, position 4095) and
// prefill Q and K (512x32x128, 4096x32x128, 512x8x128, positions from 0). GB/s = bytes read + written
// (2 * elements * 4 + the positions) / time; "% copy" is that against the shader copy bandwidth measured in the
// same run (also read + write).
#include <cstdio>

#include "core/error.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;

namespace {

const cli::OptionSpec k_options[] = {
    {"shapes", "s", true,
     "comma-separated TOKENSxHEADSxHEAD_DIM (default 1x32x128,512x32x128,4096x32x128,512x8x128; "
     "--quick 1x32x128,64x8x64)"},
};

OpSpec rope_spec(int64_t tokens, int64_t heads, int64_t head_dim, model::RopePairing pairing) {
  OpSpec spec;
  spec.shape = shape_name({tokens, heads, head_dim});
  spec.type = "f32";
  spec.nmse_limit = 1e-8;  // f32 angles against the CPU's f64 (vk_ops_test.cpp)
  spec.build = [=](bool) {
    const int64_t start = tokens == 1 ? 4095 : 0;
    engine::OpCase c(tokens, start + tokens);
    c.start_pos = start;
    const engine::BufferId x = c.input("q", tokens * heads * head_dim, 1);
    c.add("rope", engine::RopeOp{x, c.plan.positions, tokens, heads, head_dim, head_dim, pairing, 10000.f, 1.f});
    return Built{std::move(c), x};
  };
  return spec;
}

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, "vk_rope_bench", "RoPE: GB/s (read + write), % of copy bandwidth.",
                                     k_options, options);
  if (!args) return 0;
  OpBench bench("vk_rope_bench", options);
  const char* default_shapes =
      bench.small_shapes() ? "1x32x128,64x8x64" : "1x32x128,512x32x128,4096x32x128,512x8x128";
  const auto shapes = parse_shapes(args->get("shapes", default_shapes), 3, "shapes");
  for (const auto& s : shapes) {
    if (s[2] % 2 != 0) fail("--shapes: the head dim must be even");
    for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves}) {
      Result r = bench.run(rope_spec(s[0], s[1], s[2], pairing));
      const double gbps = (double(s[0] * s[1] * s[2]) * 8 + double(s[0]) * 4) / r.seconds * 1e-9;
      r.columns = {{"GB/s", gbps}, bench.percent_of_copy(gbps)};
      bench.add(std::move(r));
    }
  }
  bench.note("in place: the timed runs keep rotating the same buffer (the values do not change the speed)");
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_rope_bench", run, argc, argv); }
