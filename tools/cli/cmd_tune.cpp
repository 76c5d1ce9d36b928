// greta-vk tune MODEL: measures the tile of the Vulkan prefill matmul kernels for every distinct prefill matmul of the
// model (weight type, N rows, K columns) at --batch tokens on one device, and stores the winners in the tuning cache
// (<cache dir>/vk-matmul-tuning.txt) that every later Vulkan run reads. The measuring is src/vk/backend/tuner.h; this
// file collects the model's matmuls from its prefill plan and prints the table. A second run finds the cache warm
// and only prints the cached choices (--force measures again).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "generation.h"
#include "vk/backend/tuner.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_tune_options[] = {
    {"batch", "b", true, "tokens per prefill step to tune for, comma separated (default 512; a tuned tile serves "
                         "steps of its bucket: <=64, <=256, <=1024, more)"},
    {"device", nullptr, true, "Vulkan device index as `greta-vk devices` lists them"},
    {"force", "f", false, "measure again even when the cache already holds every shape"},
    {"reps", "r", true, "timed runs per candidate at most (default 5)"},
    {"max-time", nullptr, true, "seconds after which a candidate's runs stop, at least 2 (default 0.25)"},
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage =
    "greta-vk tune MODEL [--batch 512[,M...]] [--device N] [--force] [--reps 5] [--max-time 0.25]";

std::vector<int64_t> batches_from(const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : comma_items(text)) {
    const std::optional<int64_t> v = parse_integer(item, 5, 1 << 20);
    if (!v)
      fail("--batch ", text, ": expected token counts of 5..1048576, comma separated (up to 4 tokens run the decode "
           "matvec, which has no tile)");
    out.push_back(*v);
  }
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void print_table(const vk::TuneReport& report) {
  std::printf("| shape (type N x K) | tokens | kernel | tried | best tile | us | TFLOP/s | default us | speed-up |\n");
  std::printf("| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |\n");
  for (const vk::TuneRow& r : report.rows) {
    if (r.int8_gemm) {  // no tile: the int8 GEMM's is its own rule (op_matmul.cpp)
      std::printf("| %s %lldx%lld | %lld | int8 GEMM, no tile | n/a | n/a | n/a | n/a | n/a | n/a |\n",
                  model::type_name(r.shape.type), (long long)r.shape.n, (long long)r.shape.k, (long long)r.m);
      continue;
    }
    const std::string tried = r.cached ? "cached" : r.rejected ? cat(r.candidates, " (", r.rejected, " rejected)")
                                                               : cat(r.candidates);
    const bool has_default = r.default_us > 0;
    std::printf("| %s %lldx%lld | %lld | %s | %s | %s | %s | %s | %s | %s |\n", model::type_name(r.shape.type),
                (long long)r.shape.n, (long long)r.shape.k, (long long)r.m, vk::gemm_kernel_name(r.shape.kernel),
                tried.c_str(), vk::tile_name(r.shape.kernel, r.best).c_str(), fixed(r.best_us, 1).c_str(),
                fixed(r.tflops(), r.tflops() >= 1 ? 2 : 4).c_str(),
                has_default ? fixed(r.default_us, 1).c_str() : "n/a",
                has_default && r.best_us > 0 ? cat(fixed(r.default_us / r.best_us, 2), "x").c_str() : "n/a");
  }
}

}  // namespace

int cmd_tune(int argc, char** argv) {
  Args args(argc, argv, k_tune_options);
  if (args.has("help")) {
    std::printf("usage: %s\n\nTimes candidate tiles of the Vulkan prefill matmul kernels for each distinct matmul "
                "of MODEL (one-op plans, GPU timestamps; each candidate's output checked against the default tile's) "
                "and stores the fastest in the tuning cache that later runs read ($GRETA_CACHE_DIR, else "
                "~/.cache/greta: vk-matmul-tuning.txt). Skipped when the cache already holds every shape.\n\n%s",
                k_usage, usage_options(k_tune_options).c_str());
    return 0;
  }
  args.expect_positional(1, 1, k_usage);
  vk::TuneOptions options;
  const std::vector<int64_t> batches = batches_from(args.get("batch", "512"));
  options.device = int(args.get_int("device", -1));
  if (args.has("device") && options.device < 0) fail("--device ", options.device, ": device indices start at 0");
  options.force = args.has("force");
  const int64_t reps = args.get_int("reps", 5);
  if (reps < 1 || reps > 1000) fail("--reps ", reps, ": must be 1..1000");
  options.reps = int(reps);
  options.max_seconds = args.get_double("max-time", 0.25);
  if (!(options.max_seconds >= 0 && options.max_seconds <= 3600)) fail("--max-time must be 0..3600 seconds");
  options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };

  const std::string path = args.positional()[0];
  const ModelFiles files = read_model(path);
  const engine::ModelWeights weights = engine::map_weights(files.file, files.config);
  for (size_t b = 0; b < batches.size(); ++b) {
    options.batch = batches[b];
    // The model's matmuls at this batch: the plan the engine would run, its MatMul ops' weights. In the smallest token
    // bucket (up to 64: the batched decode steps) every token's logits, as there each token is a sequence's: the
    // output projection is one of those steps' GEMMs (the 8B's at 64 sequences: 0.84 ms of a 13.7 ms step, H200).
    const bool all_logits = vk::token_bucket(options.batch) == vk::token_bucket(1);
    const engine::Plan plan =
        engine::build_plan(files.config, weights, engine::PlanShape::single(options.batch, options.batch, all_logits));
    std::set<engine::WeightId> seen;
    std::vector<engine::WeightDesc> matmuls;
    for (const engine::PlanOp& op : plan.ops)
      if (const auto* mm = std::get_if<engine::MatMulOp>(&op.op); mm && mm->n_tokens == options.batch)
        if (seen.insert(mm->weight).second) matmuls.push_back(weights.table[size_t(mm->weight)]);

    const vk::TuneReport report = vk::tune_matmuls(matmuls, options);
    for (const std::string& note : report.notes) std::fprintf(stderr, "greta-vk tune: warning: %s\n", note.c_str());
    if (report.skipped) {
      std::printf("%s%s: skipping %s at %lld tokens: the tuning cache %s already holds every prefill matmul that "
                  "has a tile (--force measures again). Cached choices:\n\n",
                  b ? "\n" : "", report.device.c_str(), path.c_str(), (long long)options.batch,
                  report.cache_path.c_str());
    } else {
      std::printf("%s%s: tuned the prefill matmuls of %s at %lld tokens; written to %s\n\n", b ? "\n" : "",
                  report.device.c_str(), path.c_str(), (long long)options.batch, report.cache_path.c_str());
    }
    print_table(report);
  }
  std::printf("\nus: fastest of the timed runs (GPU timestamps); a candidate replaces the default only when more "
              "than 2%% faster\n");
  return 0;
}

}  // namespace greta::cli
