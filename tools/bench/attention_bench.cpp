// vk_attention_bench / hip_attention_bench (one source, GRETA_BENCH_HIP = 0 / 1): causal attention over a KV cache
// of ctx positions, GQA by default (32 query heads, 8 KV heads, head dim 128):
//   prefill  ctx tokens at positions 0 .. ctx-1 (each attends to the keys up to its own position);
//   decode   one token at position ctx-1 (attends to all ctx keys).
// The kernel column names what ran (Vulkan: attention_f32 / attention_coopmat_f16 / split-K decode; HIP: flash
// attention on matrix cores or split-K). GFLOP/s = 4 * heads * head_dim * (attended keys summed over the tokens) /
// time (q.k and p.v, 2 FLOPs per multiply-add each); on HIP "% peak" (prefill) against the fp16 matrix-core peak the
// plugin reports. KV GB/s = the K and V rows the step covers (ctx * kv_heads * head_dim * 2 * 2 or 4 bytes: --kv
// f16 (the engine's default cache) or f32), each counted
// once, / time; for decode, its fraction of the bandwidth ceiling (Vulkan: the shader copy measured in the same run;
// HIP: the plugin's peak). Prefill is checked against the CPU on its last 16 tokens (op_bench.h).
#include <cstdio>

#include "core/error.h"
#include "op_bench.h"

using namespace greta;
using namespace greta::bench;

namespace {

constexpr BenchTarget k_target = GRETA_BENCH_HIP ? BenchTarget::hip : BenchTarget::vulkan;
constexpr const char* k_name = GRETA_BENCH_HIP ? "hip_attention_bench" : "vk_attention_bench";

const cli::OptionSpec k_options[] = {
    {"ctx", "c", true, "comma-separated context lengths (default 512,1024,2048,4096,8192; --quick 64,128)"},
    {"mode", "m", true, "prefill, decode or both (default both)"},
    {"heads", nullptr, true, "query heads (default 32)"},
    {"kv-heads", nullptr, true, "KV heads (default 8)"},
    {"head-dim", nullptr, true, "head dimension (default 128)"},
    {"kv", nullptr, true, "KV cache element type: f16 (the engine's default) or f32 (default f16)"},
    k_require_device_option,
};

int run(int argc, char** argv) {
  OpBenchOptions options;
  const auto args = parse_op_options(argc, argv, k_name, "Attention, prefill and decode: GFLOP/s and GB/s of KV read.",
                                     k_options, options);
  if (!args) return 0;
  GretaHipDeviceInfo hip_info{};
  const auto bench = open_bench(k_target, k_name, options, *args, hip_info);
  if (!bench) return 0;
  const char* default_ctx = bench->small_shapes() ? "64,128" : "512,1024,2048,4096,8192";
  const auto contexts = parse_ints(args->get("ctx", default_ctx), "ctx");
  const std::string mode = args->get("mode", "both");
  if (mode != "prefill" && mode != "decode" && mode != "both") fail("--mode must be prefill, decode or both");
  const int64_t heads = args->get_int("heads", 32), kv_heads = args->get_int("kv-heads", 8),
                head_dim = args->get_int("head-dim", 128);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) fail("--heads must be a positive multiple of --kv-heads");
  if (head_dim < 1) fail("--head-dim must be positive");
  const std::string kv = args->get("kv", "f16");
  if (kv != "f16" && kv != "f32") fail("--kv must be f16 or f32");
  const engine::ElemType kv_type = kv == "f16" ? engine::ElemType::F16 : engine::ElemType::F32;
  const double peak_gflops = k_target == BenchTarget::hip ? hip_info.peak_fp16_tflops * 1e3 : 0;

  for (int64_t ctx : contexts)
    for (bool prefill : {true, false}) {
      if (mode != "both" && (mode == "prefill") != prefill) continue;
      const AttentionShape s{prefill ? ctx : 1, prefill ? 0 : ctx - 1, ctx, heads, kv_heads, head_dim, kv_type};
      Result r = bench->run(attention_spec(s, cat(prefill ? "prefill " : "decode ", ctx)));
      const double gflops = 4.0 * double(heads * head_dim) * attended_keys(s) / r.seconds * 1e-9;
      const double gbps = kv_bytes(s) / r.seconds * 1e-9;
      r.columns = {{"GFLOP/s", gflops}};
      if (peak_gflops > 0) r.columns.push_back({"% peak", prefill ? 100.0 * gflops / peak_gflops : kNaN});
      r.columns.push_back({"KV GB/s", gbps});
      r.columns.push_back(prefill ? Column{bench->ceiling_column(), kNaN} : bench->percent_of_copy(gbps));
      bench->add(std::move(r));
    }
  bench->note(cat("heads ", heads, ", kv heads ", kv_heads, ", head dim ", head_dim,
                  "; prefill = ctx tokens at positions 0..ctx-1, decode = 1 token at position ctx-1"));
  if (peak_gflops > 0)
    bench->note(cat("% peak (prefill): fraction of the fp16 matrix-core peak the HIP plugin reports "
                    "(GretaHipDeviceInfo::peak_fp16_tflops, approximate: ",
                    hip_info.peak_fp16_tflops, " TFLOP/s); not measured"));
  bench->note("KV GB/s counts each cached K and V row once (GQA heads sharing a KV head and prefill tokens re-read "
              "it); the bandwidth fraction is given for decode only: prefill is compute-bound");
  bench->print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main(k_name, run, argc, argv); }
