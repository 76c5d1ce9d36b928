// hip_attention_bench: vk_attention_bench on the HIP backend (docs/hip.md): causal attention over a KV cache of ctx
// positions, GQA by default (32 query heads, 8 KV heads, head dim 128):
//   prefill  ctx tokens at positions 0 .. ctx-1: flash attention on matrix cores (fp16 Q, K, P, V; >= 16 tokens);
//   decode   one token at position ctx-1: the fp32 split-K kernel.
// GFLOP/s = 4 * heads * head_dim * (attended keys summed over the tokens) / time; "% peak" (prefill) against the
// plugin's fp16 matrix-core peak (GretaHipDeviceInfo::peak_fp16_tflops). KV GB/s = the K and V rows the step covers,
// each counted once, / time; for decode "% peak BW" is that against the plugin's peak memory bandwidth. Prefill is
// checked against the CPU on its last 16 tokens, at the matrix-core limit (2e-6, as tests/hip) for flash attention.
// Without a HIP device: one line "hip_attention_bench: no HIP device (...)", exit 0 (exit 1 with --require-device).
#include <cstdio>

#include "core/error.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;

namespace {

constexpr const char* k_name = "hip_attention_bench";

const cli::OptionSpec k_options[] = {
    {"ctx", "c", true, "comma-separated context lengths (default 512,1024,2048,4096,8192; --quick 64,128)"},
    {"mode", "m", true, "prefill, decode or both (default both)"},
    {"heads", nullptr, true, "query heads (default 32)"},
    {"kv-heads", nullptr, true, "KV heads (default 8)"},
    {"head-dim", nullptr, true, "head dimension (default 128)"},
    k_require_device_option,
};

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, k_name,
                                     "Attention on the HIP backend, prefill and decode: GFLOP/s and GB/s of KV read.",
                                     k_options, options);
  if (!args) return 0;
  GretaHipDeviceInfo info{};
  auto backend = hip_backend(k_name, options, args->has("require-device"), info);
  if (!backend) return 0;
  OpBench bench(k_name, options, std::move(*backend));
  const char* default_ctx = bench.small_shapes() ? "64,128" : "512,1024,2048,4096,8192";
  const auto contexts = parse_ints(args->get("ctx", default_ctx), "ctx");
  const std::string mode = args->get("mode", "both");
  if (mode != "prefill" && mode != "decode" && mode != "both") fail("--mode must be prefill, decode or both");
  const int64_t heads = args->get_int("heads", 32), kv_heads = args->get_int("kv-heads", 8),
                head_dim = args->get_int("head-dim", 128);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) fail("--heads must be a positive multiple of --kv-heads");
  if (head_dim < 1) fail("--head-dim must be positive");
  const double peak = info.peak_fp16_tflops * 1e3;  // GFLOP/s

  for (int64_t ctx : contexts)
    for (bool prefill : {true, false}) {
      if (mode != "both" && (mode == "prefill") != prefill) continue;
      const AttentionShape s{prefill ? ctx : 1, prefill ? 0 : ctx - 1, ctx, heads, kv_heads, head_dim};
      OpSpec spec = attention_spec(s, cat(prefill ? "prefill " : "decode ", ctx));
      // Flash attention (fp16 operands) on >= 16 tokens with matrix cores: the tests' matrix-core limit.
      if (info.matrix_cores && (prefill ? ctx : 1) >= 16) spec.nmse_limit = 2e-6;
      Result r = bench.run(spec);
      const double gflops = 4.0 * double(heads * head_dim) * attended_keys(s) / r.seconds * 1e-9;
      const double gbps = kv_bytes(s) / r.seconds * 1e-9;
      r.columns = {{"GFLOP/s", gflops},
                   {"% peak", prefill && peak > 0 ? 100.0 * gflops / peak : kNaN},
                   {"KV GB/s", gbps},
                   prefill ? Column{"% peak BW", kNaN} : bench.percent_of_copy(gbps)};
      bench.add(std::move(r));
    }
  bench.note(cat("heads ", heads, ", kv heads ", kv_heads, ", head dim ", head_dim,
                 "; prefill = ctx tokens at positions 0..ctx-1, decode = 1 token at position ctx-1"));
  bench.note(cat("% peak (prefill): fraction of the fp16 matrix-core peak the HIP plugin reports "
                 "(GretaHipDeviceInfo::peak_fp16_tflops, approximate: ",
                 info.peak_fp16_tflops, " TFLOP/s); not measured"));
  bench.note("KV GB/s counts each cached K and V row once (GQA heads sharing a KV head and prefill tokens re-read "
             "it); % peak BW is given for decode only: prefill is compute-bound");
  bench.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main(k_name, run, argc, argv); }
