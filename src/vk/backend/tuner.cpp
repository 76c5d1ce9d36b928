#include "vk/backend/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "core/error.h"
#include "engine/op_case.h"
#include "engine/plan.h"
#include "vk/backend/encoder.h"
#include "vk/backend/vk_backend.h"
#include "vk/pipelines.h"

namespace greta::vk {

namespace {

// The default keeps its place unless a candidate is more than this much faster: timing noise then cannot flip the
// choice between runs, and tuning never swaps tiles for nothing.
constexpr double kMinGain = 0.02;
// Output agreement with the default tile: the f32 tiled kernel only reorders f32 sums; the cooperative-matrix one
// rounds its operands to f16 (the limits of tests/vk/vk_ops_test.cpp).
constexpr double kTiledNmse = 1e-9;
constexpr double kF16OperandsNmse = 2e-6;
// GPUs lower their clocks when idle, and the tuner mostly is: the pipelines of each candidate are built between short
// bursts of GPU work. On the H100 the SM clock fell from 1980 to 345 MHz a few candidates into a run, and every later
// candidate measured about 5x slow (q4_0 512x11008x4096 on the default tile: 1540 us against 301 in vk_gemm_bench),
// so the tuner swapped in tiles that cost 7B pp512 2 %. Each candidate therefore runs back to back for this long
// before it is timed, which brings the clock back up (it reached 1980 MHz within 250 ms in nvidia-smi's samples).
constexpr double kGpuWarmupSeconds = 0.3;

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0 ? num / den : num;
}

// A one-op plan: y[M, N] = x[M, K] * W^T with the weight loaded as `weight`.
struct MatmulPlan {
  engine::Plan plan;
  engine::BufferId x = engine::kNoBuffer, y = engine::kNoBuffer;
};

MatmulPlan matmul_plan(engine::WeightId weight, int64_t m, int64_t n, int64_t k) {
  MatmulPlan p;
  p.plan.shape = engine::PlanShape::single(m, m, true, engine::ElemType::F32);
  p.plan.tokens = p.plan.add_buffer("tokens", engine::ElemType::I32, engine::BufferRole::Tokens, m);
  p.plan.positions = p.plan.add_buffer("positions", engine::ElemType::I32, engine::BufferRole::Positions, m);
  p.x = p.plan.add_buffer("x", engine::ElemType::F32, engine::BufferRole::Scratch, m * k);
  p.y = p.plan.add_buffer("y", engine::ElemType::F32, engine::BufferRole::Scratch, m * n);
  p.plan.ops.push_back({"matmul", -1, engine::MatMulOp{p.x, p.y, weight, m, k, n}});
  return p;
}

struct Measured {
  double us = 0;              // fastest timed run
  std::vector<float> output;  // of the first run
};

// Prepares `mp` with `config`, runs it once (the output), on a GPU (`flush` set) warms it up with it for
// kGpuWarmupSeconds, then times it.
Measured measure(engine::Backend& backend, const MatmulPlan& mp, const std::vector<float>& x,
                 const MatmulConfig& config, const TuneOptions& options, engine::CacheFlush* flush) {
  set_matmul_config(backend, config);
  auto prepared = backend.prepare(mp.plan);
  set_matmul_config(backend, std::nullopt);
  backend.write(*prepared, mp.x, 0, x);
  // The plan's only step inputs are tokens and positions (all 0: a matmul reads neither).
  const std::vector<int32_t> zeros(size_t(mp.plan.shape.n_tokens), 0);
  engine::StepInput step;
  step.tokens = zeros;
  step.positions = zeros;
  backend.execute(*prepared, step);
  Measured m;
  m.output.resize(size_t(mp.plan.buffers[size_t(mp.y)].elems));
  backend.read(*prepared, mp.y, 0, m.output);
  const double warmup_seconds = flush ? kGpuWarmupSeconds : 0.0;  // a CPU device has no clocks to raise
  const auto warmup_start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - warmup_start).count() < warmup_seconds) {
    backend.execute(*prepared, step);
    prepared->op_spans().clear();
  }

  double best = INFINITY;
  const auto start = std::chrono::steady_clock::now();
  for (int run = 0; run < std::max(options.reps, 2); ++run) {
    auto& seconds = prepared->mutable_op_seconds();
    std::fill(seconds.begin(), seconds.end(), 0.0);
    if (flush) flush->run();
    backend.execute(*prepared, step);
    prepared->op_spans().clear();
    best = std::min(best, seconds[0]);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run >= 1 && wall > options.max_seconds) break;
  }
  if (!(best > 0)) fail("tune: the device reported no GPU timestamps for the matmul; cannot time it");
  m.us = best * 1e6;
  return m;
}

// Times every valid candidate of `shape` and returns the row (with `best` the winner).
TuneRow tune_one(engine::Backend& backend, engine::WeightId weight, const MatmulShapeClass& shape, int64_t m,
                 const TuneOptions& options, engine::CacheFlush* flush) {
  TuneRow row;
  row.shape = shape;
  row.m = m;
  const MatmulPlan mp = matmul_plan(weight, m, shape.n, shape.k);
  std::vector<float> x(size_t(m * shape.k));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : x) v = dist(rng);

  const double limit = shape.kernel == GemmKernel::coopmat ? kF16OperandsNmse : kTiledNmse;
  const MatmulTile small = default_tile(shape.kernel, m);
  const MatmulTile dflt = matmul_config_valid(backend, {shape.kernel, small}) ? small : default_tile(shape.kernel);
  std::vector<float> reference;  // the default's output (or the first valid candidate's when it is not valid)
  double best_us = INFINITY;
  for (const MatmulTile& tile : tune_tiles(shape.kernel, m)) {
    const MatmulConfig config{shape.kernel, tile};
    if (!matmul_config_valid(backend, config)) continue;
    Measured r;
    try {
      r = measure(backend, mp, x, config, options, flush);
    } catch (const Error&) {
      if (reference.empty()) throw;  // the reference must run
      ++row.rejected;  // e.g. a pipeline the driver cannot build: not a candidate here
      continue;
    }
    if (reference.empty()) {
      for (float v : r.output)
        if (!std::isfinite(v))
          fail("tune: ", describe(shape), " with the ", tile_name(shape.kernel, tile),
               " tile produced a non-finite value; not tuning a kernel that does not work");
      reference = std::move(r.output);
    } else if (!(nmse(r.output, reference) <= limit)) {
      ++row.rejected;  // computes something else: never a winner
      continue;
    }
    ++row.candidates;
    if (tile == dflt) row.default_us = r.us;
    if (r.us < best_us) {
      best_us = r.us;
      row.best = tile;
    }
  }
  GRETA_CHECK(row.candidates > 0, "no valid ", gemm_kernel_name(shape.kernel), " tile for ", describe(shape));
  row.best_us = best_us;
  if (row.default_us > 0 && row.default_us <= best_us * (1 + kMinGain)) {
    row.best = dflt;
    row.best_us = row.default_us;
  }
  return row;
}

// Whether the backend runs `weight`'s matmul of m tokens on the int8 GEMM, which has no tile to tune: asked of the
// backend itself (a one-op plan's kernel list), so that the tuner and the engine's choice cannot disagree.
bool runs_int8_gemm(engine::Backend& backend, engine::WeightId weight, const MatmulShapeClass& s, int64_t m) {
  if (s.kernel != GemmKernel::coopmat) return false;
  const MatmulPlan mp = matmul_plan(weight, m, s.n, s.k);
  const auto prepared = backend.prepare(mp.plan);
  return describe_kernels(*prepared).find("matmul_coopmat_q8") != std::string::npos;
}

}  // namespace

TuneReport tune_matmuls(std::span<const engine::WeightDesc> weights, const TuneOptions& options) {
  if (options.batch <= 4 || options.batch > (int64_t(1) << 20))
    fail("--batch ", options.batch, ": the prefill matmul kernels run from 5 tokens up (at most 1048576)");
  if (options.reps < 1 || !(options.max_seconds >= 0)) fail("tune: reps must be >= 1 and the time limit >= 0");
  VkBackendOptions bo;
  bo.device = options.device;
  bo.cache_dir = options.cache_dir;
  bo.tuning_cache = false;  // every tile is set explicitly here
  std::unique_ptr<engine::Backend> backend = create_vk_backend(bo);

  TuneReport report;
  const std::string name = backend->name();  // "vulkan: <device>"
  report.device = name.substr(name.find(": ") == std::string::npos ? 0 : name.find(": ") + 2);
  report.cache_path = tuning_cache_path(*backend);
  if (report.cache_path.empty())
    fail("tune: no cache directory (set GRETA_CACHE_DIR, XDG_CACHE_HOME or HOME)");
  std::string warning;
  TuningCache cache = TuningCache::load(report.cache_path, warning);
  if (!warning.empty()) report.notes.push_back(warning + "; it will be replaced");
  const DeviceKey device = tuning_device_key(*backend);

  // Distinct shape classes, in the order of their first weight; those that run the matvec kernels (rows that are not
  // whole vec4) have no tile.
  std::map<MatmulShapeClass, size_t> seen;
  std::vector<std::pair<MatmulShapeClass, size_t>> classes;  // class, index into weights
  for (size_t i = 0; i < weights.size(); ++i) {
    const engine::WeightDesc& w = weights[i];
    const engine::MatMulOp op{0, 0, 0, options.batch, w.cols, w.rows};
    if (w.rows < 2 || matmul_uses_matvec(MatmulKernel::automatic, op)) continue;
    const MatmulShapeClass s{automatic_gemm_kernel(*backend, w.type), w.type, token_bucket(options.batch), w.rows,
                             w.cols};
    if (seen.emplace(s, i).second) classes.emplace_back(s, i);
  }
  if (classes.empty()) fail("tune: the model has no prefill matmul that runs a tiled kernel");

  std::vector<engine::WeightDesc> to_load;
  std::vector<std::pair<MatmulShapeClass, size_t>> to_tune;  // class, index into to_load
  for (const auto& [s, i] : classes) {
    const TunedEntry* e = options.force ? nullptr : cache.find(device, s);
    if (!e) {
      to_tune.emplace_back(s, to_load.size());
      to_load.push_back(weights[i]);
      continue;
    }
    TuneRow row;
    row.shape = s;
    row.weight = weights[i].name;
    row.m = e->m;
    row.cached = true;
    row.best = e->tile;
    row.best_us = e->best_us;
    row.default_us = e->default_us;
    report.rows.push_back(row);
  }
  if (to_tune.empty()) {
    report.skipped = true;
    return report;
  }

  backend->load_weights(to_load);
  // GPUs: flush the last-level cache before each timed run (engine::CacheFlush); a CPU device (lavapipe) has none to
  // speak of.
  std::optional<engine::CacheFlush> flush;
  if (!runs_on_cpu_device(*backend)) flush.emplace(*backend);
  backend->set_profiling(true);
  size_t tuned = 0;
  for (const auto& [s, i] : to_tune) {
    TuneRow row;
    if (runs_int8_gemm(*backend, engine::WeightId(i), s, options.batch)) {
      row.shape = s;
      row.m = options.batch;
      row.int8_gemm = true;
    } else {
      if (options.progress) options.progress(cat("tuning ", describe(s), " at ", options.batch, " tokens"));
      row = tune_one(*backend, engine::WeightId(i), s, options.batch, options, flush ? &*flush : nullptr);
      cache.set(device, s, TunedEntry{row.best, row.m, row.best_us, row.default_us});
      ++tuned;
    }
    row.weight = to_load[i].name;
    report.rows.push_back(row);
  }
  if (const auto messages = validation_messages(*backend); !messages.empty())
    fail("tune: the validation layer reported ", messages.size(), " message(s); first: ", messages[0]);
  report.skipped = tuned == 0;
  if (tuned > 0 || !warning.empty()) cache.save(report.cache_path);  // a corrupt file is replaced, as its note says
  return report;
}

}  // namespace greta::vk
