// vk_softmax_bench: GRETA has no standalone softmax op: softmax is fused into attention's online softmax
// (attention.comp). This bench therefore times the attention op at decode (one token at position ctx-1 over ctx
// cached keys) with a small head dim (16 by default), where per key the work is a 16-element q.k dot, the
// online-softmax update (running max, exp, rescale) and a 16-element p.v accumulation, so the softmax part is a large
// share of the time. It is still attention: the dot products and the KV reads are included.
//   Mscores/s = softmax elements (heads * ctx scores) / time; KV GB/s and "% copy" as in vk_attention_bench.
#include <cstdio>

#include "core/error.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;

namespace {

const cli::OptionSpec k_options[] = {
    {"ctx", "c", true, "comma-separated softmax lengths = context (default 512,2048,8192,32768; --quick 256,1024)"},
    {"heads", nullptr, true, "query heads = softmax rows (default 32)"},
    {"kv-heads", nullptr, true, "KV heads (default 8)"},
    {"head-dim", nullptr, true, "head dimension (default 16: small, so the softmax part dominates)"},
};

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, "vk_softmax_bench",
                                     "Softmax as fused in attention: decode attention with a small head dim.",
                                     k_options, options);
  if (!args) return 0;
  OpBench bench("vk_softmax_bench", options);
  const auto contexts = parse_ints(args->get("ctx", bench.small_shapes() ? "256,1024" : "512,2048,8192,32768"), "ctx");
  const int64_t heads = args->get_int("heads", 32), kv_heads = args->get_int("kv-heads", 8),
                head_dim = args->get_int("head-dim", 16);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) fail("--heads must be a positive multiple of --kv-heads");
  if (head_dim < 1) fail("--head-dim must be positive");

  for (int64_t ctx : contexts) {
    const AttentionShape s{1, ctx - 1, ctx, heads, kv_heads, head_dim};
    Result r = bench.run(attention_spec(s, cat(heads, " rows x ", ctx)));
    const double gbps = kv_bytes(s) / r.seconds * 1e-9;
    r.columns = {{"Mscores/s", double(heads * ctx) / r.seconds * 1e-6}, {"KV GB/s", gbps},
                 bench.percent_of_copy(gbps)};
    bench.add(std::move(r));
  }
  bench.note(cat("GRETA has no standalone softmax op: softmax is fused into attention's online softmax. These rows "
                 "time the attention op at decode (1 token at position ctx-1, ", heads, " heads, ", kv_heads,
                 " kv heads) with head dim ", head_dim, ", so per key the work is a ", head_dim,
                 "-element q.k dot, the online-softmax update and a ", head_dim,
                 "-element p.v update: the softmax part is a large share, but the time includes the dot products and "
                 "the KV reads; it is not a standalone softmax kernel"));
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_softmax_bench", run, argc, argv); }
