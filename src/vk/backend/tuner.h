// The measuring half of `greta-vk tune` (the CLI collects a model's prefill matmuls and prints the report; the cache
// is tuning.h). For each shape class (kernel, weight type, token bucket, N, K) of the given weights:
//   1. the kernel is the one automatic prefill matmuls use on the device (matmul_coopmat or matmul_tiled);
//   2. the default tile for the batch, then every other candidate tile of that kernel (tuning.h: tune_tiles) that
//      the device can run, is prepared as a one-op plan (the model's own weight, random activations of `batch` rows)
//      with set_matmul_config;
//   3. each candidate's output is compared with the default tile's (NMSE limit 1e-9 for the f32 tiled kernel, 2e-6
//      for f16 operands): a candidate that computes something else (or that fails to prepare or run, e.g. a pipeline
//      the driver cannot build) is rejected, never timed;
//   4. on a GPU each candidate then runs back to back for 0.3 s (the clocks fall while the tuner builds pipelines),
//      and is timed up to `reps` times (or until `max_seconds` have passed, at least twice) with GPU timestamps, the
//      last-level cache evicted before each run; its time is the fastest run (noise only ever adds time);
//   5. the fastest candidate wins, unless the default is within 2 % of it (so repeated runs agree, and the default
//      stays where tuning buys nothing); the winner is stored with both times.
// Shape classes already in the cache are skipped unless `force`; when every class is cached nothing is measured. A
// class the backend runs on the int8 GEMM at this batch (matmul_coopmat_q8: batched steps of up to 64 tokens on
// devices with int8 cooperative matrices), which has no tile, is listed as such and neither timed nor cached.
// No Vulkan types here: the CLI includes this header.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "vk/backend/tuning.h"

namespace greta::vk {

struct TuneOptions {
  int device = -1;            // `greta-vk devices` index; -1: the default device
  int64_t batch = 512;        // tokens (M) of the timed matmuls; more than 4 (fewer run the decode matvec)
  bool force = false;         // measure shape classes the cache already holds
  int reps = 5;               // timed runs per candidate at most
  double max_seconds = 0.25;  // stop repeating a candidate after this much wall time (at least 2 runs)
  std::string cache_dir;      // empty: the default cache directory (pipelines.h: default_cache_dir)
  std::function<void(const std::string&)> progress;  // a line per shape class as it is measured (optional)
};

struct TuneRow {
  MatmulShapeClass shape;
  std::string weight;     // the first weight of the class ("blk.0.attn_q.weight")
  int64_t m = 0;          // tokens (the batch)
  bool cached = false;    // taken from the cache, not measured in this run
  bool int8_gemm = false;  // runs the int8 GEMM at this batch: no tile, nothing measured
  int candidates = 0;     // candidates timed (valid on the device, output matching the default's)
  int rejected = 0;       // candidates whose output differed from the default's, or that failed to prepare or run
  MatmulTile best;
  double best_us = 0;
  double default_us = 0;  // 0: the default tile is not valid on this device
  double tflops() const {
    return best_us > 0 ? 2.0 * double(m) * double(shape.n) * double(shape.k) / best_us * 1e-6 : 0;
  }
};

struct TuneReport {
  std::string device;      // the device's name
  std::string cache_path;  // the file read and written
  bool skipped = false;    // every shape class was cached or runs the int8 GEMM: nothing was measured or written
  std::vector<TuneRow> rows;
  std::vector<std::string> notes;  // warnings (a corrupt cache that is being replaced, ...)
};

// Tunes the prefill matmuls of `weights` (one weight per distinct type and shape; their data is uploaded as is) and
// writes the winners into the tuning cache. Throws greta::Error with one line: no Vulkan device, no cache directory,
// a cache that cannot be written, a default tile whose output is not finite, a validation-layer message.
TuneReport tune_matmuls(std::span<const engine::WeightDesc> weights, const TuneOptions& options);

}  // namespace greta::vk
