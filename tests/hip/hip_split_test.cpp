// Layer splits with the HIP backend (its CUDA build on the lent NVIDIA GPU; every case returns at once without a
// device): the goldens over the four splits of tests/engine/split_goldens.h, concurrent sequences on splits, and
// --device-memory-limit (the capacity it reports, a clear error past it, the CPU taking the blocks that do not fit).
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/split_goldens.h"
#include "hip_test_device.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;

TEST_CASE("hip layer split: every golden passes with blocks on the CPU or on a second logical device") {
  HIP_DEVICE_OR_SKIP();
  test::check_goldens_over_splits("hip", [](int) { return test::hip_backend(); });
}

TEST_CASE("hip layer split: golden prompts as concurrent sequences beside six others") {
  HIP_DEVICE_OR_SKIP();
  test::check_batched_goldens_over_splits("hip", [](int) { return test::hip_backend(); });
}

TEST_CASE("hip layer split: a prompt of many passes runs pipelined over two devices, logits unchanged") {
  HIP_DEVICE_OR_SKIP();
  test::check_pipelined_passes([](int) { return test::hip_backend(); });
}

// Two HIP GPUs (`--backend hip --devices 0,1`; the case says it did not run where there is one): every golden over
// both, even and 1:3.
TEST_CASE("hip layer split over two GPUs: every golden, even and --tensor-split 1,3") {
  HIP_DEVICE_OR_SKIP();
  if (!test::two_gpus_or_skip(hip::list_devices().size())) return;
  test::check_goldens_over_two_gpus("hip", [](int device) { return test::hip_backend(device); });
}

TEST_CASE("hip device memory limit: it is the capacity, and a model past it is a clear error naming the device") {
  HIP_DEVICE_OR_SKIP();
  auto hip = test::hip_backend(0, 64 << 10);
  CHECK(hip->memory_capacity() == uint64_t(64 << 10));
  const std::string path = test::shared_path("models/stories260K-q8_0.gguf");
  CHECK_THROWS_WITH_AS(Engine::open(path, std::move(hip)), doctest::Contains("64.00 KiB"), Error);
}

// As `--device-memory-limit 2.5M` with the default --gpu-layers auto: the blocks past what fits go to the CPU.
TEST_CASE("hip device memory limit: auto placement puts what does not fit on the CPU, and the goldens still pass") {
  HIP_DEVICE_OR_SKIP();
  int runs = 0;
  for (const std::string& file : test::golden_json_files("hip")) {
    const test::GoldenCase g = test::load_golden(file);
    if (std::filesystem::path(g.model_path).filename() != "stories260K.gguf") continue;
    const model::GgufFile gguf = model::GgufFile::open(g.model_path);
    const model::ModelConfig config = model::ModelConfig::from_gguf(gguf);
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(test::hip_backend(0, uint64_t(5) << 19));  // 2.5 MiB
    backends.push_back(std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{.threads = 2}));
    std::vector<PlacementDevice> devices;
    for (const auto& b : backends) devices.push_back({b->name(), b->memory_capacity()});
    PlacementRequest request;
    request.cpu_offload = true;
    request.ctx = 256;
    Placement placement = place_layers(config, map_weights(gguf, config), devices, request);
    MESSAGE(placement.describe());
    CHECK(placement.layers[0] > 0);
    CHECK(placement.layers[1] > 0);
    const test::GoldenResult r = test::run_golden(g, std::make_unique<SplitBackend>(std::move(backends), std::move(placement)));
    MESSAGE(g.name, ": worst row NMSE ", r.worst_row_nmse, " (limit ", r.limit, ")");
    CHECK(r.ok());
    ++runs;
  }
  CHECK(runs >= test::golden_min(2));
}
