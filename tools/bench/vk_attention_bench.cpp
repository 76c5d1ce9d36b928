// vk_attention_bench: causal attention (attention.comp: one workgroup per token and query head, online softmax) over
// a KV cache of ctx positions, GQA by default (32 query heads, 8 KV heads, head dim 128):
//   prefill  ctx tokens at positions 0 .. ctx-1 (each attends to the keys up to its own position);
//   decode   one token at position ctx-1 (attends to all ctx keys).
// GFLOP/s = 4 * heads * head_dim * (attended keys summed over the tokens) / time (q.k and p.v, 2 FLOPs per
// multiply-add each). KV GB/s = the K and V rows the step covers (ctx * kv_heads * head_dim * 2 * 4 bytes), each
// counted once, / time; for decode, "% copy" is that against the shader copy bandwidth measured in the same run.
#include <cstdio>

#include "core/error.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;

namespace {

const cli::OptionSpec k_options[] = {
    {"ctx", "c", true, "comma-separated context lengths (default 512,1024,2048,4096,8192; --quick 64,128)"},
    {"mode", "m", true, "prefill, decode or both (default both)"},
    {"heads", nullptr, true, "query heads (default 32)"},
    {"kv-heads", nullptr, true, "KV heads (default 8)"},
    {"head-dim", nullptr, true, "head dimension (default 128)"},
};

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, "vk_attention_bench",
                                     "Attention, prefill and decode: GFLOP/s and GB/s of KV read.", k_options, options);
  if (!args) return 0;
  OpBench bench("vk_attention_bench", options);
  const char* default_ctx = bench.small_shapes() ? "64,128" : "512,1024,2048,4096,8192";
  const auto contexts = parse_ints(args->get("ctx", default_ctx), "ctx");
  const std::string mode = args->get("mode", "both");
  if (mode != "prefill" && mode != "decode" && mode != "both") fail("--mode must be prefill, decode or both");
  const int64_t heads = args->get_int("heads", 32), kv_heads = args->get_int("kv-heads", 8),
                head_dim = args->get_int("head-dim", 128);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) fail("--heads must be a positive multiple of --kv-heads");
  if (head_dim < 1) fail("--head-dim must be positive");

  for (int64_t ctx : contexts)
    for (bool prefill : {true, false}) {
      if (mode != "both" && (mode == "prefill") != prefill) continue;
      const AttentionShape s{prefill ? ctx : 1, prefill ? 0 : ctx - 1, ctx, heads, kv_heads, head_dim};
      Result r = bench.run(attention_spec(s, cat(prefill ? "prefill " : "decode ", ctx)));
      const double gflops = 4.0 * double(heads * head_dim) * attended_keys(s) / r.seconds * 1e-9;
      const double gbps = kv_bytes(s) / r.seconds * 1e-9;
      r.columns = {{"GFLOP/s", gflops}, {"KV GB/s", gbps},
                   prefill ? Column{"% copy", kNaN} : bench.percent_of_copy(gbps)};
      bench.add(std::move(r));
    }
  bench.note(cat("heads ", heads, ", kv heads ", kv_heads, ", head dim ", head_dim,
                 "; prefill = ctx tokens at positions 0..ctx-1, decode = 1 token at position ctx-1"));
  bench.note("KV GB/s counts each cached K and V row once (GQA heads sharing a KV head and prefill tokens re-read "
             "it); % copy is given for decode only: prefill is compute-bound, its KV GB/s is no bandwidth figure");
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_attention_bench", run, argc, argv); }
