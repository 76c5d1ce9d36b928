// Layer splits (engine/placement.h, engine/split_backend.h) on the CPU: where the placement puts each block for
// shares, capacities and --gpu-layers, and that a model spread over several CPU backends computes exactly what one
// CPU backend computes (the same kernels on the same inputs: bit for bit), alone, as concurrent sequences and in
// verify mode. tests/vk/vk_split_test.cpp runs the goldens over splits with Vulkan devices.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/placement.h"
#include "engine/split_backend.h"
#include "engine/verify.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;

namespace {

struct OpenModel {
  model::GgufFile file;
  model::ModelConfig config;
  ModelWeights weights;
  explicit OpenModel(const std::string& path)
      : file(model::GgufFile::open(path)), config(model::ModelConfig::from_gguf(file)), weights(map_weights(file, config)) {}
};

std::unique_ptr<Backend> cpu_backend() { return std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{.threads = 2}); }

// n CPU backends with the blocks split by `shares`.
std::unique_ptr<SplitBackend> cpu_split(const OpenModel& m, std::vector<double> shares) {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<PlacementDevice> devices;
  for (size_t i = 0; i < shares.size(); ++i) {
    backends.push_back(cpu_backend());
    devices.push_back({backends.back()->name(), backends.back()->memory_capacity()});
  }
  PlacementRequest request;
  request.tensor_split = std::move(shares);
  Placement p = place_layers(m.config, m.weights, devices, request);
  return std::make_unique<SplitBackend>(std::move(backends), std::move(p));
}

std::vector<TokenId> tokens_for(const Engine& e, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = TokenId(1 + rng() % uint32_t(e.vocab_size() - 1));
  return t;
}

}  // namespace

TEST_CASE("placement: blocks by share, the embedding with block 0, the output with the last block") {
  const OpenModel m(test::shared_path("models/stories260K.gguf"));
  const int64_t L = m.config.n_layers;
  REQUIRE(L >= 4);
  REQUIRE(m.weights.output != m.weights.token_embd);
  const uint64_t big = uint64_t(1) << 40;
  const std::vector<PlacementDevice> two = {{"gpu a", big}, {"gpu b", big}};

  PlacementRequest even;
  const Placement p = place_layers(m.config, m.weights, two, even);
  CHECK(p.layers == std::vector<int64_t>{L - L / 2, L / 2});
  for (int64_t l = 1; l < L; ++l) CHECK(p.layer_device[size_t(l)] >= p.layer_device[size_t(l - 1)]);
  CHECK(p.weight_bytes[0] + p.weight_bytes[1] == m.weights.total_bytes());  // untied: every weight on one device
  CHECK(p.describe().find("gpu a: blocks 0-") != std::string::npos);
  CHECK(p.describe().find("and the output") != std::string::npos);

  PlacementRequest uneven;
  uneven.tensor_split = {3, 1};
  const Placement q = place_layers(m.config, m.weights, two, uneven);
  CHECK(q.layers[0] == (3 * L + 2) / 4);
  CHECK(q.layers[0] + q.layers[1] == L);

  // --gpu-layers with the CPU as the last device.
  PlacementRequest offload;
  offload.cpu_offload = true;
  offload.gpu_layers = 1;
  const std::vector<PlacementDevice> gpu_cpu = {{"gpu", big}, {"cpu", big}};
  const Placement o = place_layers(m.config, m.weights, gpu_cpu, offload);
  CHECK(o.layers == std::vector<int64_t>{1, L - 1});
  CHECK(o.layer_device.front() == 0);
  CHECK(o.layer_device.back() == 1);
}

TEST_CASE("placement: as many blocks as fit, a tied output on both ends, clear errors") {
  const OpenModel m(test::shared_path("models/stories260K.gguf"));
  const int64_t L = m.config.n_layers;
  uint64_t block0 = 0;
  for (const WeightDesc& d : m.weights.table)
    if (weight_layer(d.name) == 0) block0 += d.bytes;
  CHECK(block0 > 0);
  CHECK(weight_layer("blk.12.attn_q.weight") == 12);
  CHECK(weight_layer("blk.x.attn_q.weight") == -1);
  CHECK(weight_layer("token_embd.weight") == -1);

  // A GPU that holds about half the weights (plus what the activations and KV need) gets about half the blocks.
  PlacementRequest fit;
  fit.cpu_offload = true;
  fit.ctx = 64;
  fit.max_batch = 8;
  const uint64_t half = m.weights.total_bytes() / 2;
  const std::vector<PlacementDevice> devices = {{"small gpu", half}, {"cpu", uint64_t(1) << 40}};
  const Placement p = place_layers(m.config, m.weights, devices, fit);
  CHECK(p.layers[0] > 0);
  CHECK(p.layers[0] < L);
  CHECK(p.weight_bytes[0] <= half);
  // The KV room reported is the tightest device's per block, for every block.
  CHECK(p.memory_capacity >= m.weights.total_bytes());
  CHECK(p.memory_capacity <= m.weights.total_bytes() + (half - p.weight_bytes[0]) / uint64_t(p.layers[0]) * uint64_t(L));

  // Forcing every block onto a GPU too small for them fails naming the device and the way out.
  PlacementRequest all = fit;
  all.gpu_layers = L;
  try {
    place_layers(m.config, m.weights, devices, all);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("small gpu cannot hold its part") != std::string::npos);
    CHECK(std::string(e.what()).find("--gpu-layers") != std::string::npos);
  }
  PlacementRequest bad;
  bad.gpu_layers = L + 1;
  CHECK_THROWS_WITH_AS(place_layers(m.config, m.weights, devices, bad), doctest::Contains("--gpu-layers"), Error);
  bad = {};
  bad.tensor_split = {1, 1, 1};
  CHECK_THROWS_WITH_AS(place_layers(m.config, m.weights, devices, bad), doctest::Contains("--tensor-split"), Error);
  bad.tensor_split = {0, 0};
  CHECK_THROWS_WITH_AS(place_layers(m.config, m.weights, devices, bad), doctest::Contains("add up to 0"), Error);

  // Tied embeddings: the output projection is token_embd, held at both ends when they differ. (The shared tied model
  // has one block, so stories260K with its output matrix taken away stands in.)
  ModelWeights tied = m.weights;
  tied.table[size_t(tied.output)].bytes = 0;
  tied.output = tied.token_embd;
  const std::vector<PlacementDevice> two = {{"a", uint64_t(1) << 40}, {"b", uint64_t(1) << 40}};
  const Placement t = place_layers(m.config, tied, two, PlacementRequest{});
  const uint64_t embd = tied.table[size_t(tied.token_embd)].bytes;
  CHECK(t.weight_bytes[0] + t.weight_bytes[1] == tied.total_bytes() + embd);
  CHECK(place_layers(m.config, m.weights, two, PlacementRequest{}).weight_bytes[1] + embd ==
        t.weight_bytes[1] + m.weights.table[size_t(m.weights.output)].bytes);
}

// Every architecture, split over two and three CPU backends, equals one CPU backend bit for bit: prompt logits of
// every row, then decode steps; and as concurrent sequences of different lengths.
TEST_CASE("layer split over CPU backends equals one CPU backend exactly") {
  for (const std::string rel :
       {"models/stories260K.gguf", "models/synth-qwen2-d256-q8_0.gguf", "next/models/synth-phi3-d256-q4_k_m.gguf",
        "next/models/synth-qwen3moe-d128-q8_0.gguf", "next/models/synth-gemma3-d128-q8_0.gguf",
        "next/models/synth-gptoss-d128-mxfp4.gguf"}) {
    CAPTURE(rel);
    const std::string path = test::shared_path(rel);
    const OpenModel m(path);
    const EngineOptions options{.ctx = 160, .max_batch = 32, .max_seqs = 4};
    Engine one = Engine::open(path, cpu_backend(), options);
    for (const std::vector<double>& shares : {std::vector<double>{1, 1}, std::vector<double>{1, 2, 1}}) {
      auto split = cpu_split(m, shares);
      SplitBackend* s = split.get();
      Engine spread = Engine::open(path, std::move(split), options);
      // A prompt longer than a sliding window (gemma3, gpt-oss) and a step: every row's logits.
      const std::vector<TokenId> prompt = tokens_for(one, 70, 7);
      one.reset();
      CHECK(one.prefill_all_logits(prompt) == spread.prefill_all_logits(prompt));
      for (TokenId t : tokens_for(one, 3, 8)) {
        const auto a = one.decode(t);
        const std::vector<float> a_copy(a.begin(), a.end());
        const auto b = spread.decode(t);
        CHECK(a_copy == std::vector<float>(b.begin(), b.end()));
      }
      CHECK(s->crossings().copies > 0);
      CHECK(s->crossings().bytes > 0);

      // Three sequences of different lengths in one step, then decoding together.
      std::vector<SeqId> ids_one, ids_spread;
      std::vector<std::vector<TokenId>> prompts;
      for (size_t i = 0; i < 3; ++i) {
        prompts.push_back(tokens_for(one, 5 + 9 * i, uint32_t(20 + i)));
        ids_one.push_back(one.new_sequence());
        ids_spread.push_back(spread.new_sequence());
      }
      for (int step = 0; step < 3; ++step) {
        std::vector<StepEntry> a, b;
        for (size_t i = 0; i < 3; ++i) {
          a.push_back({ids_one[i], prompts[i]});
          b.push_back({ids_spread[i], prompts[i]});
        }
        const StepLogits& la = one.step(a);
        std::vector<std::vector<float>> rows;
        for (size_t i = 0; i < 3; ++i) rows.emplace_back(la.row(i).begin(), la.row(i).end());
        const StepLogits& lb = spread.step(b);
        for (size_t i = 0; i < 3; ++i) {
          CHECK(rows[i] == std::vector<float>(lb.row(i).begin(), lb.row(i).end()));
          prompts[i] = {argmax(rows[i])};
        }
      }
      for (size_t i = 0; i < 3; ++i) one.release_sequence(ids_one[i]), spread.release_sequence(ids_spread[i]);
    }
  }
}

// A CPU backend that counts how many of its kind execute at once (`running`, its peak in `peak`) and takes a few ms
// more per call, so that passes which can overlap do.
class OverlapProbe final : public cpu::CpuBackend {
public:
  OverlapProbe(std::atomic<int>& running, std::atomic<int>& peak)
      : cpu::CpuBackend(cpu::CpuOptions{.threads = 1}), running_(running), peak_(peak) {}
  void execute(PreparedPlan& plan, const StepInput& step, OpRange range) override {
    const int now = ++running_;
    int seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    cpu::CpuBackend::execute(plan, step, range);
    --running_;
  }

private:
  std::atomic<int>& running_;
  std::atomic<int>& peak_;
};

// A step of many passes with no logits read between them (a long prompt, or many prompts whose logits only the last
// wants) runs pipelined: the first backend runs pass k + 1 while the second runs pass k. The logits stay those of one
// CPU backend, bit for bit, and the engine's next step (decode) sees every pass's KV rows.
TEST_CASE("layer split: a step's passes run pipelined over the backends, results unchanged") {
  const std::string path = test::shared_path("models/stories260K.gguf");
  const OpenModel m(path);
  const EngineOptions options{.ctx = 256, .max_batch = 16, .max_seqs = 4};
  Engine one = Engine::open(path, cpu_backend(), options);
  std::atomic<int> running{0}, peak{0};
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<PlacementDevice> devices;
  for (int i = 0; i < 2; ++i) {
    backends.push_back(std::make_unique<OverlapProbe>(running, peak));
    devices.push_back({backends.back()->name(), backends.back()->memory_capacity()});
  }
  PlacementRequest request;
  request.tensor_split = {1, 1};
  Placement placement = place_layers(m.config, m.weights, devices, request);
  auto split = std::make_unique<SplitBackend>(std::move(backends), std::move(placement));
  SplitBackend* s = split.get();
  Engine spread = Engine::open(path, std::move(split), options);

  const std::vector<TokenId> prompt = tokens_for(one, 150, 11);  // 10 passes of 16 tokens
  const auto a = one.prefill(prompt);
  const std::vector<float> expected(a.begin(), a.end());
  const auto b = spread.prefill(prompt);
  CHECK(expected == std::vector<float>(b.begin(), b.end()));
  CHECK(peak.load() == 2);
  CHECK(s->crossings().copies == 10);  // one hand-off per pass, each counted once its write is done
  for (TokenId t : tokens_for(one, 4, 12)) {
    const auto x = one.decode(t);
    const std::vector<float> x_copy(x.begin(), x.end());
    const auto y = spread.decode(t);
    CHECK(x_copy == std::vector<float>(y.begin(), y.end()));
  }
  CHECK(running.load() == 0);
}

// Verify mode reads and resyncs every op's buffers through the split (each from the backend that wrote it).
TEST_CASE("verify mode through a layer split: every op equal to the CPU reference") {
  const OpenModel m(test::shared_path("next/models/synth-qwen3moe-d128-q8_0.gguf"));
  auto split = cpu_split(m, {1, 1});
  cpu::CpuBackend reference(cpu::CpuOptions{.threads = 2});
  const std::vector<TokenId> tokens = {1, 15, 42, 7, 300, 99, 5, 250};
  const VerifyReport report = verify(m.config, m.weights, *split, reference, tokens, VerifyOptions{.max_nmse = 0});
  MESSAGE(report.summary());
  CHECK(report.ok());
  CHECK(report.worst_nmse == 0);
}
