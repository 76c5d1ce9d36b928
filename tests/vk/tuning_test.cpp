// The matmul tuning cache (src/vk/backend/tuning.h), the backend's tile choice (forced > env > cache > default) and
// `greta-vk tune` end to end. On lavapipe (CI) there are no cooperative matrices, so matmul_tiled's tiles are what
// gets tuned there; on a coopmat device the same tests exercise matmul_coopmat's.
#include <algorithm>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/op_case.h"
#include "engine/op_cases.h"
#include "test_util.h"
#include "vk/backend/encoder.h"
#include "vk/backend/tuning.h"
#include "vk/backend/vk_backend.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using model::GgmlType;
namespace fs = std::filesystem;
namespace gt = greta::test;      // fixtures, op cases, nmse
namespace vt = greta::vk::test;  // scratch directories, environment, subprocesses

namespace {

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), std::streamsize(text.size()));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

DeviceKey some_device(const char* name) {
  const uint8_t uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  return make_device_key(0x10de, 0x2330, 0x91b7c000, uuid, name);
}

// A backend with its own cache directory, taking the experiment switches (GRETA_VK_COOPMAT_TILE...) from the
// environment unless `switches` is false.
std::unique_ptr<engine::Backend> backend_in(const fs::path& cache_dir, bool switches = true) {
  VkBackendOptions o;
  o.cache_dir = cache_dir.string();
  if (switches) o.switches = ExperimentSwitches::from_environment();
  return create_vk_backend(o);
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// A prefill matmul case (67 tokens, 101 rows) of `type`, its kernels and its NMSE against the CPU.
struct CaseResult {
  std::string kernels;
  double nmse = 0;
};
CaseResult run_matmul(engine::Backend& vk, GgmlType type, uint32_t seed = 7) {
  auto [c, out] = gt::matmul_case(type, 67, 96, seed, 101);
  cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
  const auto want = c.run_once(cpu, out);
  auto prepared = c.load_and_prepare(vk);
  c.run(vk, *prepared);
  const auto got = c.read(vk, *prepared, out);
  CHECK(validation_messages(vk).empty());
  return {describe_kernels(*prepared), gt::nmse(got.data(), want.data(), got.size())};
}

double limit_for(const std::string& kernels) { return kernels.find("coopmat") != std::string::npos ? 2e-6 : 1e-9; }

// A candidate other than the default that the backend's device can run for `kernel`, skipping `except`.
MatmulTile other_tile(const engine::Backend& b, GemmKernel kernel, const MatmulTile& except = {}) {
  for (const MatmulTile& t : tile_candidates(kernel))
    if (t != default_tile(kernel) && t != except && matmul_config_valid(b, {kernel, t})) return t;
  FAIL("no second valid tile");
  return {};
}

}  // namespace

TEST_CASE("tuning cache: text round trip, save and load, tile names") {
  TuningCache cache;
  const DeviceKey a = some_device("NVIDIA H100 80GB HBM3"), b = some_device("llvmpipe (LLVM 15.0.6, 256 bits)");
  cache.set(a, {GemmKernel::coopmat, GgmlType::Q4_0, 1024, 11008, 4096}, {{64, 128, 2, 4, 64}, 512, 812.5, 905});
  cache.set(a, {GemmKernel::coopmat, GgmlType::Q4_K, 0, 4096, 4096}, {{256, 128, 4, 2, 32}, 4096, 4975, 5100.2});
  cache.set(a, {GemmKernel::tiled, GgmlType::F32, 64, 32, 64}, {{32, 32, 0, 0, 16}, 20, 3.5, 0});
  cache.set(b, {GemmKernel::tiled, GgmlType::Q6_K, 256, 256, 512}, {{64, 128, 0, 0, 16}, 256, 2325.4, 2432.7});
  CHECK(cache.size() == 4);

  const TuningCache back = TuningCache::parse(cache.to_text());
  CHECK(back.to_text() == cache.to_text());
  REQUIRE(back.size() == 4);
  const TunedEntry* e = back.find(a, {GemmKernel::coopmat, GgmlType::Q4_0, 1024, 11008, 4096});
  REQUIRE(e);
  CHECK(e->tile == MatmulTile{64, 128, 2, 4, 64});
  CHECK(e->m == 512);
  CHECK(e->best_us == doctest::Approx(812.5));
  CHECK(back.find(b, {GemmKernel::tiled, GgmlType::Q6_K, 256, 256, 512})->tile == MatmulTile{64, 128, 0, 0, 16});
  CHECK_FALSE(back.find(b, {GemmKernel::tiled, GgmlType::Q6_K, 1024, 256, 512}));  // another bucket
  CHECK_FALSE(back.find(some_device("another GPU"), {GemmKernel::tiled, GgmlType::Q6_K, 256, 256, 512}));

  const fs::path path = vt::scratch_dir("tuning-roundtrip") / "sub" / TuningCache::kFileName;
  cache.save(path.string());
  std::string warning;
  CHECK(TuningCache::load(path.string(), warning).to_text() == cache.to_text());
  CHECK(warning.empty());
  CHECK(TuningCache::load((path.parent_path() / "missing.txt").string(), warning).size() == 0);
  CHECK(warning.empty());  // no file: an empty cache, no warning

  CHECK(tile_name(GemmKernel::tiled, kDefaultTiledTile) == "64x64x16");
  CHECK(tile_name(GemmKernel::coopmat, kDefaultCoopmatTile) == "128x128x2x4x64x2");
  CHECK(default_tile(GemmKernel::coopmat) == kDefaultCoopmatTile);
  CHECK(default_tile(GemmKernel::tiled) == kDefaultTiledTile);
  CHECK(parse_tile(GemmKernel::coopmat, "64x64x2x2") == MatmulTile{64, 64, 2, 2, 32});
  CHECK(parse_tile(GemmKernel::coopmat, "128x128x2x2x32x2") == MatmulTile{128, 128, 2, 2, 32, 2});
  CHECK(tile_name(GemmKernel::coopmat, MatmulTile{128, 128, 2, 2, 32, 2}) == "128x128x2x2x32x2");
  CHECK_FALSE(parse_tile(GemmKernel::coopmat, "128x128x2x2x32x2x2"));
  CHECK_FALSE(parse_tile(GemmKernel::tiled, "64x64x16x2"));
  CHECK_FALSE(parse_tile(GemmKernel::tiled, "64x64"));
  CHECK_FALSE(parse_tile(GemmKernel::tiled, "64x64x0"));
  CHECK_FALSE(parse_tile(GemmKernel::tiled, "64x64x-16"));
  CHECK_FALSE(parse_tile(GemmKernel::tiled, "64x64x99999999999"));
  CHECK(token_bucket(5) == 64);
  CHECK(token_bucket(65) == 256);
  CHECK(token_bucket(1024) == 1024);
  CHECK(token_bucket(1025) == 0);
  CHECK(tile_candidates(GemmKernel::tiled)[0] == kDefaultTiledTile);
  CHECK(tile_candidates(GemmKernel::coopmat)[0] == kDefaultCoopmatTile);
  // tune times the default for the batch first; the batched steps' defaults join the candidates, once.
  const auto candidates = tile_candidates(GemmKernel::coopmat);
  const auto count_of = [](const std::vector<MatmulTile>& tiles, const MatmulTile& t) {
    return std::count(tiles.begin(), tiles.end(), t);
  };
  for (int64_t n : {16, 32, 48, 64, 512, 4096}) {
    CAPTURE(n);
    const std::vector<MatmulTile> tiles = tune_tiles(GemmKernel::coopmat, n);
    CHECK(tiles[0] == default_tile(GemmKernel::coopmat, n));
    for (const MatmulTile& t : candidates) CHECK(count_of(tiles, t) == 1);
    CHECK(count_of(tiles, tiles[0]) == 1);
    const bool among = std::count(candidates.begin(), candidates.end(), tiles[0]) > 0;
    CHECK(tiles.size() == candidates.size() + (among ? 0 : 1));
  }
  CHECK(tune_tiles(GemmKernel::coopmat, 64).size() == candidates.size() + 1);  // 64x32x2x1x128x4 is no candidate
  CHECK(tune_tiles(GemmKernel::tiled, 64)[0] == kDefaultTiledTile);
  // Device names that would break the line format are made safe.
  CHECK(make_device_key(1, 2, 3, {}, "  GPU\nwith\ttabs  ").name == "GPU?with?tabs");
}

TEST_CASE("tuning cache: corrupt, truncated and hostile files are ignored with one warning") {
  TuningCache good;
  good.set(some_device("GPU"), {GemmKernel::tiled, GgmlType::Q4_0, 64, 256, 256}, {{64, 32, 0, 0, 16}, 64, 7, 8});
  const std::string text = good.to_text();
  const std::string header = "greta-vk-matmul-tuning 1\n";
  const std::string device = "device 10de 2330 1 0102030405060708090a0b0c0d0e0f10 GPU\n";
  const std::vector<std::string> bad = {
      "",                                                    // empty: no header
      "garbage\n",                                           // not ours
      "greta-vk-matmul-tuning 2\n",                          // a future version
      header + "tiled q4_0 64 256 256 64x32x16 7 8\n",       // an entry before any device
      header + device + "tiled q4_0 64 256 256 64x32x16 7\n",                      // truncated entry
      header + device + "tiled q4_0 64 256 256 64x32x16 7 8 9\n",                  // extra field
      header + device + "tensor q4_0 64 256 256 64x32x16 7 8\n",                   // unknown kernel
      header + device + "tiled q9_9 64 256 256 64x32x16 7 8\n",                    // unknown type
      header + device + "tiled q4_0 0 256 256 64x32x16 7 8\n",                     // zero tokens
      header + device + "tiled q4_0 64 -256 256 64x32x16 7 8\n",                   // negative N
      header + device + "tiled q4_0 64 99999999999999999999 256 64x32x16 7 8\n",   // N overflows
      header + device + "tiled q4_0 64 256 256 64x32x4x4x16 7 8\n",                // a coopmat tile for tiled
      header + device + "tiled q4_0 64 256 256 64x32x0 7 8\n",                     // zero BK
      header + device + "tiled q4_0 64 256 256 64x32x16 nan 8\n",                  // not a time
      header + device + "tiled q4_0 64 256 256 64x32x16 1e999 8\n",                // infinite
      header + "device 10de 2330 1 0102 GPU\n",                                    // short UUID
      header + "device zz 2330 1 0102030405060708090a0b0c0d0e0f10 GPU\n",          // not hex
      header + "device 10de 2330 1 0102030405060708090a0b0c0d0e0f10\n",            // no name
      header + device + "tiled q4_0 64 256 256 64x32x16 7 8" + std::string(1, '\0') + "\n",  // control character
      header + std::string(2000, 'x') + "\n",                                       // overlong line
      std::string(2 << 20, '#'),                                                    // over 1 MiB
  };
  const fs::path dir = vt::scratch_dir("tuning-corrupt");
  for (size_t i = 0; i < bad.size(); ++i) {
    CAPTURE(i);
    CHECK_THROWS_AS(TuningCache::parse(bad[i]), Error);
    const fs::path path = dir / ("bad" + std::to_string(i) + ".txt");
    write_file(path, bad[i]);
    std::string warning;
    CHECK(TuningCache::load(path.string(), warning).size() == 0);
    CHECK(warning.find("ignoring the matmul tuning cache") == 0);
    CHECK(warning.find('\n') == std::string::npos);
  }
  // Every truncation and random byte damage of a good file either parses or is refused with an Error: never a crash.
  for (size_t n = 0; n <= text.size(); ++n) {
    try {
      TuningCache::parse(std::string_view(text).substr(0, n));
    } catch (const Error&) {
    }
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string damaged = text;
    for (int k = 0; k < 3; ++k) damaged[rng() % damaged.size()] = char(rng() & 0xff);
    try {
      TuningCache::parse(damaged);
    } catch (const Error&) {
    }
  }
  // A directory where the file should be: ignored too.
  fs::create_directories(dir / "a-directory");
  std::string warning;
  CHECK(TuningCache::load((dir / "a-directory").string(), warning).size() == 0);
  CHECK_FALSE(warning.empty());

  // The backend starts and computes correctly over a corrupt cache.
  const fs::path bdir = vt::scratch_dir("tuning-corrupt-backend");
  write_file(bdir / TuningCache::kFileName, bad[4]);
  auto vk = backend_in(bdir);
  const CaseResult r = run_matmul(*vk, GgmlType::Q4_0);
  CHECK(r.kernels.find("(default)") != std::string::npos);
  CHECK(r.nmse <= limit_for(r.kernels));
}

// matmul_coopmat's limits on a device like the H100 (subgroups of 32, 1024 invocations, 48 KiB of shared memory):
// two shared-memory stages where they fit, else one; a tile whose one stage does not fit is invalid.
TEST_CASE("coopmat tile validity and shared-memory stages") {
  DeviceInfo info;
  info.subgroup_size = 32;
  info.max_workgroup_invocations = 1024;
  info.max_workgroup_size = {1024, 1024, 64};
  info.max_shared_memory = 49152;
  const auto tile = [](const char* name) { return *parse_tile(GemmKernel::coopmat, name); };
  const MatmulTile bk32 = tile("128x128x4x2x32x2"), bk64 = tile("128x128x4x2x64x2");
  CHECK(matmul_tile_valid(GemmKernel::coopmat, bk32, info));
  CHECK(coopmat_stages(bk32, info) == 2);  // 2 x 256 rows x 80 bytes = 40 KiB
  CHECK(matmul_tile_valid(GemmKernel::coopmat, bk64, info));
  CHECK(coopmat_stages(bk64, info) == 1);  // 256 rows x 144 bytes = 36 KiB, twice would be 72
  info.max_shared_memory = 98304;
  CHECK(coopmat_stages(bk64, info) == 2);
  info.max_shared_memory = 32768;
  CHECK_FALSE(matmul_tile_valid(GemmKernel::coopmat, bk64, info));
  CHECK(matmul_tile_valid(GemmKernel::coopmat, bk32, info));
  CHECK(coopmat_stages(bk32, info) == 1);
}

// coopmat_split's rules, shapes of the 8B (Llama-3-8B: 4096 x 4096 Q, 1024 x 4096 K, 14336 x 4096 gate, 4096 x 14336
// down) on tiles of 64 rows: prefill doubles a lone GEMM's split while its grid is under 128 workgroups, and splits
// one sharing a stage (K and V after Q) 2 ways under 128 workgroups; batched steps
// split 4 ways up to 32 tokens, else 2 widened while one wave of two workgroups per compute unit holds the grid.
TEST_CASE("coopmat split-K: prefill, batched steps and the one-wave widening at 33-64 tokens") {
  vt::ScopedEnv no_split("GRETA_VK_GEMM_SPLIT", nullptr);
  const ExperimentSwitches env = ExperimentSwitches::from_environment();
  DeviceInfo h200;
  h200.compute_units = 132;  // a wave: 264 workgroups
  // Prefill (512 tokens on 128 x 128 tiles): Q's 32 x 4 workgroups of 64 K steps unsplit; K's 8 x 4 split 4 ways
  // alone, 2 beside Q; the 7B's K (32 x 4) unsplit beside Q.
  CHECK(coopmat_split(4 * 32, 64, true, 512, h200, env) == 1);
  CHECK(coopmat_split(4 * 8, 64, true, 512, h200, env) == 4);
  CHECK(coopmat_split(4 * 8, 64, false, 512, h200, env) == 2);
  CHECK(coopmat_split(4 * 32, 64, false, 512, h200, env) == 1);
  CHECK(coopmat_split(4 * 8, 16, true, 512, h200, env) == 1);  // 16 K steps per split at least
  CHECK(coopmat_split(4 * 8, 16, false, 512, h200, env) == 1);
  // 16 and 32 tokens: 4 splits whatever the grid; at least 8 K steps each.
  CHECK(coopmat_split(64, 32, true, 16, h200, env) == 4);
  CHECK(coopmat_split(448, 112, false, 32, h200, env) == 4);
  CHECK(coopmat_split(64, 16, true, 32, h200, env) == 2);
  // 64 tokens: down (64 tiles, 112 K steps of 128) and attn_output (64, 32) widen to 4, K (16 tiles) to 4 (8 K steps
  // each), gate (224 tiles) and the output matrix (2004) stay at 2.
  CHECK(coopmat_split(64, 112, true, 64, h200, env) == 4);
  CHECK(coopmat_split(64, 32, false, 64, h200, env) == 4);
  CHECK(coopmat_split(16, 32, false, 64, h200, env) == 4);
  CHECK(coopmat_split(224, 32, true, 64, h200, env) == 2);
  CHECK(coopmat_split(2004, 32, true, 64, h200, env) == 2);
  CHECK(coopmat_split(64, 112, true, 48, h200, env) == 4);
  // The int8 GEMM's own split (Q4_0: 3) widens the same way: 7B down (64 tiles, 86 K steps) 3 -> 4, gate (172) stays.
  CHECK(widen_batched_split(3, 64, 86, h200) == 4);
  CHECK(widen_batched_split(3, 172, 32, h200) == 3);
  // A device that reports no compute units counts 128 (a wave of 256); an 8-CU APU (a wave of 16) does not widen.
  DeviceInfo unknown, apu;
  apu.compute_units = 8;
  CHECK(coopmat_split(64, 112, true, 64, unknown, env) == 4);
  CHECK(coopmat_split(160, 112, true, 64, unknown, env) == 2);
  CHECK(coopmat_split(64, 112, true, 64, apu, env) == 2);
  // GRETA_VK_GEMM_SPLIT forces its count (within the K steps) on every rule, where the switches are taken.
  vt::ScopedEnv forced("GRETA_VK_GEMM_SPLIT", "3");
  CHECK(coopmat_split(64, 112, true, 64, h200, ExperimentSwitches()) == 4);
  CHECK(coopmat_split(64, 112, true, 64, h200, env) == 3);
  CHECK(coopmat_split(4 * 32, 2, true, 512, h200, env) == 2);
}

TEST_CASE("tile precedence: forced > env > cache > default; invalid cached tiles are ignored") {
  const fs::path dir = vt::scratch_dir("tuning-precedence");
  const GgmlType type = GgmlType::Q4_0;
  DeviceKey key;
  GemmKernel kernel{};
  MatmulTile cached, from_env;
  {
    auto probe = backend_in(dir);
    key = tuning_device_key(*probe);
    kernel = automatic_gemm_kernel(*probe, type);
    cached = other_tile(*probe, kernel);
    from_env = other_tile(*probe, kernel, cached);
    CHECK(tuning_cache_path(*probe) == (dir / TuningCache::kFileName).string());
  }
  const char* env_name = kernel == GemmKernel::coopmat ? "GRETA_VK_COOPMAT_TILE" : "GRETA_VK_TILED_TILE";
  vt::ScopedEnv no_env(env_name, nullptr);
  const MatmulShapeClass shape{kernel, type, token_bucket(67), 101, 96};
  // The coopmat GEMM reads f16 activations (matmul_coopmat_x16_<type>, op_matmul.cpp).
  const std::string kernel_name = kernel == GemmKernel::coopmat ? "matmul_coopmat_x16_q4_0 " : "matmul_tiled_q4_0 ";
  fs::remove(dir / TuningCache::kFileName);  // what an earlier subcase left

  SUBCASE("default without a cache") {
    auto vk = backend_in(dir);
    const CaseResult r = run_matmul(*vk, type);
    CHECK(r.kernels.find(kernel_name + tile_name(kernel, default_tile(kernel)) + " (default)") != std::string::npos);
    CHECK(r.nmse <= limit_for(r.kernels));
  }
  TuningCache cache;
  cache.set(key, shape, {cached, 67, 1, 2});
  cache.save((dir / TuningCache::kFileName).string());
  SUBCASE("the cache's tile, matching the CPU") {
    auto vk = backend_in(dir);
    const CaseResult r = run_matmul(*vk, type);
    CHECK_MESSAGE(r.kernels.find(kernel_name + tile_name(kernel, cached) + " (tuned)") != std::string::npos, r.kernels);
    CHECK(r.nmse <= limit_for(r.kernels));
    // Another bucket (300 tokens: <= 1024) keeps the default.
    uint32_t seed = 9;
    auto [c, out] = gt::matmul_case(type, 300, 96, seed, 101);
    auto other = backend_in(dir);
    auto prepared = c.load_and_prepare(*other);
    CHECK(describe_kernels(*prepared).find("(default)") != std::string::npos);
  }
  SUBCASE("the environment beats the cache") {
    vt::ScopedEnv env(env_name, tile_name(kernel, from_env).c_str());
    auto vk = backend_in(dir);
    const CaseResult r = run_matmul(*vk, type);
    CHECK(r.kernels.find(tile_name(kernel, from_env) + " (env)") != std::string::npos);
    CHECK(r.nmse <= limit_for(r.kernels));
  }
  SUBCASE("a backend without experiment switches ignores the environment") {
    vt::ScopedEnv env(env_name, tile_name(kernel, from_env).c_str());
    auto vk = backend_in(dir, /*switches=*/false);
    const CaseResult r = run_matmul(*vk, type);
    CHECK_MESSAGE(r.kernels.find(kernel_name + tile_name(kernel, cached) + " (tuned)") != std::string::npos, r.kernels);
    CHECK(r.nmse <= limit_for(r.kernels));
  }
  SUBCASE("a bad environment value is a one-line error") {
    vt::ScopedEnv env(env_name, "64x64x3");
    auto vk = backend_in(dir);
    CHECK_THROWS_AS(run_matmul(*vk, type), Error);
  }
  SUBCASE("set_matmul_config beats everything, then restores the usual choice") {
    vt::ScopedEnv env(env_name, tile_name(kernel, from_env).c_str());
    auto vk = backend_in(dir);
    set_matmul_config(*vk, MatmulConfig{GemmKernel::tiled, {32, 32, 0, 0, 16}});
    CHECK(run_matmul(*vk, type).kernels.find("matmul_tiled_q4_0 32x32x16 (forced)") != std::string::npos);
    set_matmul_config(*vk, std::nullopt);
    engine::OpCase c(67, 67);  // a second plan on the same backend (its weights are loaded): the usual choice again
    const engine::BufferId x = c.input("x", 67 * 96, 1), y = c.output("y", 67 * 101);
    c.add("matmul", engine::MatMulOp{x, y, 0, 67, 96, 101});
    CHECK(describe_kernels(*vk->prepare(c.plan)).find("(env)") != std::string::npos);
  }
  SUBCASE("the cache is not read when the option says so") {
    VkBackendOptions o;
    o.cache_dir = dir.string();
    o.tuning_cache = false;
    auto vk = create_vk_backend(o);
    CHECK(run_matmul(*vk, type).kernels.find("(default)") != std::string::npos);
  }
  SUBCASE("an entry the device cannot run is ignored") {
    const MatmulTile invalid = kernel == GemmKernel::coopmat ? MatmulTile{1024, 1024, 4, 4, 16}
                                                             : MatmulTile{1024, 1024, 0, 0, 1024};
    TuningCache bad;
    bad.set(key, shape, {invalid, 67, 1, 2});
    bad.save((dir / TuningCache::kFileName).string());
    auto vk = backend_in(dir);
    CHECK_FALSE(matmul_config_valid(*vk, {kernel, invalid}));
    const CaseResult r = run_matmul(*vk, type);
    CHECK(r.kernels.find("(default)") != std::string::npos);
    CHECK(r.nmse <= limit_for(r.kernels));
  }
  fs::remove(dir / TuningCache::kFileName);
}

// The candidates and the batched steps' defaults (tune_tiles at 16, 32 and 64 tokens), at 67 tokens.
TEST_CASE("every tile greta-vk tune tries that the device can run matches the CPU") {
  auto vk = backend_in(vt::scratch_dir("tuning-candidates"));
  std::vector<GemmKernel> kernels = {GemmKernel::tiled};
  if (automatic_gemm_kernel(*vk, GgmlType::Q4_0) == GemmKernel::coopmat) kernels.push_back(GemmKernel::coopmat);
  for (GemmKernel kernel : kernels) {
    std::vector<MatmulTile> tiles = tune_tiles(kernel, 64);
    for (int64_t n : {16, 32})
      if (std::count(tiles.begin(), tiles.end(), default_tile(kernel, n)) == 0)
        tiles.push_back(default_tile(kernel, n));
    for (const MatmulTile& tile : tiles) {
      if (!matmul_config_valid(*vk, {kernel, tile})) continue;
      for (GgmlType type : {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q6_K}) {
        const std::string name =
            cat(gemm_kernel_name(kernel), " ", tile_name(kernel, tile), " ", model::type_name(type));
        CAPTURE(name);
        auto fresh = backend_in(vt::scratch_dir("tuning-candidates"));
        set_matmul_config(*fresh, MatmulConfig{kernel, tile});
        uint32_t seed = 11;
        auto [c, out] = gt::matmul_case(type, 67, 256, seed, 101);
        cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
        const auto want = c.run_once(cpu, out);
        auto prepared = c.load_and_prepare(*fresh);
        c.run(*fresh, *prepared);
        const auto got = c.read(*fresh, *prepared, out);
        CHECK(describe_kernels(*prepared).find(tile_name(kernel, tile) + " (forced)") != std::string::npos);
        CHECK(gt::nmse(got.data(), want.data(), got.size()) <= (kernel == GemmKernel::coopmat ? 2e-6 : 1e-9));
        CHECK(validation_messages(*fresh).empty());
      }
    }
  }
}

TEST_CASE("greta-vk tune: writes the cache, a second run skips, a corrupt cache is replaced") {
  const fs::path dir = vt::scratch_dir("tuning-cli");
  fs::remove(dir / TuningCache::kFileName);
  const std::string model = gt::shared_path("models/synth-llama-d256-q4_0.gguf");
  const std::vector<std::string> args = {GRETA_VK_CLI, "tune", model, "--batch", "128", "--reps", "2",
                                         "--max-time", "0.02"};
  const std::vector<std::string> env = {"GRETA_CACHE_DIR=" + dir.string()};

  const vt::ProcessResult first = vt::run_process(args, env);
  CAPTURE(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.output.find("tuned the prefill matmuls") != std::string::npos);
  CHECK(first.output.find("| q4_0 256x256 | 128 |") != std::string::npos);  // q, o, gate, up, down
  CHECK(first.output.find("| q4_0 64x256 | 128 |") != std::string::npos);   // k, v (2 KV heads of 32)
  std::string warning;
  const TuningCache cache = TuningCache::load((dir / TuningCache::kFileName).string(), warning);
  CHECK(warning.empty());
  CHECK(cache.size() == 2);

  const vt::ProcessResult second = vt::run_process(args, env);
  CAPTURE(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(second.output.find("skipping") != std::string::npos);
  CHECK(second.output.find("| cached |") != std::string::npos);
  CHECK(read_file(dir / TuningCache::kFileName) == cache.to_text());

  // The engine runs the tuned tiles and generates what the CPU reference generates: a prompt of 65-256 tokens, the
  // bucket that --batch 128 filled (up to 64 tokens, devices with int8 cooperative matrices take the int8 GEMM, which
  // has no tuned tiles; op_matmul.cpp).
  const std::vector<std::string> run = {GRETA_VK_CLI, "run", model, "-p",
                                        "Once upon a time there was a girl who lived in a small house near the big "
                                        "forest with her dog and her cat. Every morning she walked to the river to "
                                        "fetch water, and every evening she told her dog and her cat a story about "
                                        "the stars, the moon and the wind that sang in the tall trees of the forest",
                                        "-n",
                                        "6", "--temp", "0", "--json", "--backend"};
  std::vector<std::string> run_vk = run, run_cpu = run;
  run_vk.push_back("vk");
  run_cpu.push_back("cpu");
  std::vector<std::string> log_env = env;
  log_env.push_back("GRETA_VK_LOG_KERNELS=1");
  const vt::ProcessResult on_vk = vt::run_process(run_vk, log_env), on_cpu = vt::run_process(run_cpu, env);
  CAPTURE(on_vk.output);
  CAPTURE(on_cpu.output);
  REQUIRE(on_vk.exit_code == 0);
  REQUIRE(on_cpu.exit_code == 0);
  CHECK(on_vk.output.find("(tuned)") != std::string::npos);
  const size_t at = on_cpu.output.find("\"tokens\":[");
  REQUIRE(at != std::string::npos);
  const std::string tokens = on_cpu.output.substr(at, on_cpu.output.find(']', at) - at + 1);  // the generated ids
  CHECK(on_vk.output.find(tokens) != std::string::npos);

  write_file(dir / TuningCache::kFileName, "greta-vk-matmul-tuning 1\ndevice nonsense\n");
  const vt::ProcessResult third = vt::run_process(args, env);
  CAPTURE(third.output);
  REQUIRE(third.exit_code == 0);
  CHECK(third.output.find("warning: ignoring the matmul tuning cache") != std::string::npos);
  CHECK(third.output.find("tuned the prefill matmuls") != std::string::npos);
  CHECK(TuningCache::load((dir / TuningCache::kFileName).string(), warning).size() == 2);

  // Up to 64 tokens (the batched decode steps) every token has logits, so the output projection (512 x 256) is tuned
  // too; at 128 (a prompt) only the last token's are made, by a matvec.
  const fs::path small_dir = vt::scratch_dir("tuning-cli-64");
  fs::remove(small_dir / TuningCache::kFileName);
  const vt::ProcessResult small = vt::run_process({GRETA_VK_CLI, "tune", model, "--batch", "64", "--reps", "2",
                                                   "--max-time", "0.02"},
                                                  {"GRETA_CACHE_DIR=" + small_dir.string()});
  CAPTURE(small.output);
  REQUIRE(small.exit_code == 0);
  CHECK(small.output.find("| q4_0 512x256 | 64 |") != std::string::npos);
  CHECK(first.output.find("| q4_0 512x256 |") == std::string::npos);
  // Where the backend runs a GEMM of 64 tokens on the int8 GEMM (devices with int8 cooperative matrices), which has
  // no tile, its shape is listed as such and neither timed nor cached; the others are tuned. The output projection's
  // shape is probed on the backend itself.
  bool int8_output = false;
  {
    auto probe = backend_in(small_dir);
    uint32_t seed = 5;
    auto [c, out] = gt::matmul_case(GgmlType::Q4_0, 64, 256, seed, 512);
    int8_output = describe_kernels(*c.load_and_prepare(*probe)).find("matmul_coopmat_q8") != std::string::npos;
  }
  const TuningCache small_cache = TuningCache::load((small_dir / TuningCache::kFileName).string(), warning);
  CHECK(count_of(small.output, "| 64 | int8 GEMM, no tile |") + small_cache.size() == 3);
  CHECK((small.output.find("| q4_0 512x256 | 64 | int8 GEMM, no tile |") != std::string::npos) == int8_output);
  CHECK((small.output.find("skipping") != std::string::npos) == (small_cache.size() == 0));

  const vt::ProcessResult bad = vt::run_process({GRETA_VK_CLI, "tune", model, "--batch", "4"}, env);
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("--batch 4: expected token counts of 5..") != std::string::npos);
}

// The experiment switches (experiment_switches.h) reach `greta-vk bench` only: `run` with a bad switch value in its
// environment runs the model as usual, `bench` (single and batched) stops with the switch's one-line error.
TEST_CASE("greta-vk: only bench reads the experiment switches") {
  const std::string model = gt::shared_path("models/synth-llama-d256-q4_0.gguf");
  const std::vector<std::string> env = {"GRETA_VK_MATMUL=bogus"};
  const vt::ProcessResult run = vt::run_process(
      {GRETA_VK_CLI, "run", model, "-p", "Once upon", "-n", "2", "--temp", "0", "--backend", "vk"}, env);
  CAPTURE(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.output.find("GRETA_VK_MATMUL") == std::string::npos);
  for (const std::vector<std::string>& bench :
       {std::vector<std::string>{GRETA_VK_CLI, "bench", model, "--backend", "vk", "-p", "8", "-n", "2", "-r", "1"},
        std::vector<std::string>{GRETA_VK_CLI, "bench", model, "--backend", "vk", "--batched", "--npp", "8", "--ntg",
                                 "2", "--npl", "2"}}) {
    const vt::ProcessResult r = vt::run_process(bench, env);
    CAPTURE(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("GRETA_VK_MATMUL=bogus: expected auto, tiled, coopmat or matvec") != std::string::npos);
  }
}
