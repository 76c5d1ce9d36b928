// The HIP backend executed on a GPU: every op against the CPU reference through the engine's backend interface (the
// engine::Backend the plugin returns, created through the loader exactly as `greta-vk --backend hip` does), every
// golden in ../shared/golden, and verify mode against the CPU. Runs with libgreta_hip.so on an AMD GPU or with
// libgreta_hip_cuda.so (the same kernel sources through nvcc, mma.sync) on an NVIDIA GPU.
//
// No device: every case prints "skipped: no HIP device (<the loader's one line>)" and passes, so plain `ctest` on
// the build machines stays green (the test is labelled hip-gpu). GRETA_HIP_REQUIRE_DEVICE=1 turns that skip into a
// failure (use it on the GPU machine, so a plugin that fails to load cannot pass silently). With a device every check
// counts. The plugin: $GRETA_HIP_PLUGIN, else the loader's search beside this executable, else the plugin this build
// made (GRETA_HIP_TEST_PLUGIN, compiled in).
//
// Errors are NMSE = sum (hip - cpu)^2 / sum cpu^2 over the op's output, with a limit per kernel family:
//   exact-arithmetic ops (embedding, kv write, elementwise)        1e-12  bit-identical decoders; single f32 ops
//   f32 reductions in another order than the CPU's fp64 (matvec,    1e-9   relative rounding ~1e-7 per element gives
//     rmsnorm, split-K attention)                                          NMSE ~1e-13; the margin covers long sums
//   rope (fp64 angles like the CPU, same operation order)           1e-8   (as the Vulkan tests)
//   matrix-core GEMM and flash attention (fp16 operands, fp32       2e-6   each operand rounded to fp16 (unit
//     accumulation)                                                        roundoff 2^-11, rms relative error
//                                                                          ~2.8e-4) gives NMSE ~1.6e-7 for a dot
//                                                                          product of two rounded operands; decoded
//                                                                          quantized weights (d * q, up to 17
//                                                                          significant bits) round once more. 2e-6
//                                                                          is the Vulkan cooperative-matrix limit.
// Which kernel runs follows the backend's documented choice (hip_backend.h): matvec for n_tokens <= 8 or F32
// weights, GEMM otherwise; flash attention for >= 16 tokens unless an F32 weight matrix is loaded (OpCase plans of
// attention load none), the fp32 split-K kernel otherwise. A device without matrix cores runs the fp32 kernels only.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/golden_run.h"
#include "engine/kv_q8.h"
#include "engine/model.h"
#include "engine/op_case.h"
#include "engine/op_cases.h"
#include "engine/plan.h"
#include "engine/verify.h"
#include "hip/hip_loader.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/quants.h"
#include "hip_test_device.h"
#include "test_util.h"

using namespace greta;
using namespace greta::engine;
using model::GgmlType;
using test::device;
using test::exists;
using test::hip_backend;

namespace {

constexpr double kExact = 1e-12, kF32 = 1e-9, kRope = 1e-8, kMatrixCore = 2e-6;
constexpr int64_t kMatvecTokens = 8;        // hip::kMatvecTokens
constexpr int64_t kFlashMinTokens = 16;     // hip_backend.hip: kPrefillAttentionMinTokens

std::unique_ptr<cpu::CpuBackend> cpu_backend() {
  return std::make_unique<cpu::CpuBackend>(cpu::CpuOptions{.threads = 4});
}

// Runs `c` on the CPU and on HIP and checks the NMSE of `out` against `limit`. Returns the NMSE.
double compare(OpCase& c, BufferId out, double limit, const std::string& what) {
  auto cpu = cpu_backend();
  const auto want = c.run_once(*cpu, out);
  auto hip = hip_backend();
  auto prepared = c.load_and_prepare(*hip);
  c.run(*hip, *prepared);
  const auto got = c.read(*hip, *prepared, out);
  REQUIRE(got.size() == want.size());
  const double e = test::nmse(got.data(), want.data(), got.size());
  CHECK_MESSAGE(e <= limit, what, ": NMSE ", e, " > ", limit);
  MESSAGE(what, ": NMSE ", e, " (limit ", limit, ")");
  return e;
}

}  // namespace

TEST_CASE("hip matmul: every weight type, decode and prefill shapes (matvec and matrix-core GEMM), against the CPU") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 100;
  for (GgmlType type : test::k_all_weight_types) {
    const std::string type_name = model::type_name(type);
    double worst_gemm = 0, worst_matvec = 0;
    for (int64_t cols : test::matmul_row_lengths(type))
      // 1 and 8: matvec; 9: the smallest GEMM; 67 and 130: partial and several 64-token tiles.
      for (int64_t n : {int64_t(1), int64_t(8), int64_t(9), int64_t(67), int64_t(130)}) {
        CAPTURE(type_name);
        CAPTURE(cols);
        CAPTURE(n);
        auto [c, out] = test::matmul_case(type, n, cols, seed);
        const int64_t rows = c.plan.buffers[size_t(out)].elems / n;
        const bool gemm = device().matrix_cores && type != GgmlType::F32 && n > kMatvecTokens;
        const double e = compare(c, out, gemm ? kMatrixCore : kF32,
                                 cat("matmul ", type_name, " ", n, "x", cols, "->", rows, gemm ? " gemm" : " matvec"));
        (gemm ? worst_gemm : worst_matvec) = std::max(gemm ? worst_gemm : worst_matvec, e);
      }
    MESSAGE("matmul ", type_name, ": worst NMSE matvec ", worst_matvec, ", gemm ", worst_gemm);
  }
}

TEST_CASE("hip matmul: model-sized rows (K = 4096, several K steps and blocks)") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 200;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16, GgmlType::Q8_0})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(64), int64_t(100)}) {
      const std::string type_name = model::type_name(type);
      CAPTURE(type_name);
      CAPTURE(n);
      auto [c, out] = test::matmul_case(type, n, 4096, seed, 300);
      const bool gemm = device().matrix_cores && n > kMatvecTokens;
      compare(c, out, gemm ? kMatrixCore : kF32, cat("matmul ", type_name, " ", n, "x4096->300", gemm ? " gemm" : " matvec"));
    }
}

TEST_CASE("hip embedding lookup: every weight type, bit-identical to the CPU") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 300;
  for (GgmlType type : test::k_all_weight_types) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    auto [c, out] = test::embed_case(type, seed);
    compare(c, out, kExact, cat("embed ", type_name));
  }
}

TEST_CASE("hip rmsnorm: odd widths, row offsets, in place") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 400;
  for (int64_t width : {int64_t(7), int64_t(64), int64_t(1031), int64_t(4096)})
    for (int64_t offset : {int64_t(0), int64_t(2)}) {
      CAPTURE(width);
      CAPTURE(offset);
      auto [c, out] = test::rmsnorm_case(width, offset, seed);
      compare(c, out, kF32, cat("rmsnorm ", width, " offset ", offset));
    }
}

TEST_CASE("hip rope: both pairings, partial rotary dims, frequency factors, large positions") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 500;
  for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
    for (int64_t head_dim : {int64_t(64), int64_t(128)})
      for (bool partial : {false, true})
        for (bool factors : {false, true}) {
          CAPTURE(int(pairing));
          CAPTURE(head_dim);
          CAPTURE(partial);
          CAPTURE(factors);
          auto [c, x] = test::rope_case(pairing, head_dim, partial, factors, seed);
          compare(c, x, kRope, cat("rope pairing ", int(pairing), " head_dim ", head_dim, partial ? " partial" : "",
                                   factors ? " factors" : ""));
        }
}

namespace {

// Runs one attention case against the CPU: attention with the kernel the backend picks, and the KV write exactly.
void check_attention(const test::AttentionShape& s, uint32_t& seed) {
  CAPTURE(s.n_tokens);
  CAPTURE(s.start_pos);
  CAPTURE(s.heads);
  CAPTURE(s.kv_heads);
  CAPTURE(s.head_dim);
  CAPTURE(s.n_seqs);
  CAPTURE(s.padding);
  const std::string kv_name = elem_type_name(s.kv_type);
  CAPTURE(kv_name);
  auto [c, out, k_cache] = test::attention_case(s, seed);
  const bool flash = device().matrix_cores && s.n_tokens >= kFlashMinTokens && s.head_dim <= 256;
  const std::string shape = cat(s.n_tokens, " tokens at ", s.start_pos, " in ", s.n_seqs, " sequence(s)",
                                s.padding ? cat(" + ", s.padding, " padding") : std::string(), ", ", s.heads, "/",
                                s.kv_heads, " heads of ", s.head_dim, ", ", kv_name, " cache");
  // An f16 or q8_0 cache holds the same values on both sides (write() and the KV write round to nearest even, or
  // quantize each block bit-identically to kv_q8_quantize), so the limits stay those of the f32 kernels and the KV
  // write (read back dequantized) is exact.
  compare(c, out, flash ? kMatrixCore : kF32, cat("attention ", shape, flash ? " flash" : " split-K"));
  compare(c, k_cache, kExact, cat("kv write ", shape));
}

}  // namespace

TEST_CASE("hip kv write + attention: prefill and decode, GQA and MQA, head dims 40..256") {
  HIP_DEVICE_OR_SKIP();
  using Shape = test::AttentionShape;
  // Decode (1 token), small batches (split-K fp32 kernel) and prefill >= 16 tokens (flash attention on matrix
  // cores): partial 16-query tiles, a start past 0 (rows cached by earlier steps), head dims 64/128/256 and odd ones.
  // One sequence on pages 1, 2, ... (page_size 32), f32 cache.
  const Shape shapes[] = {{7, 0, 8, 2, 64},    {1, 90, 8, 2, 64},   {33, 40, 4, 1, 128}, {1, 200, 4, 4, 40},
                          {70, 3, 2, 1, 256},  {1, 511, 6, 3, 96},  {16, 0, 4, 2, 64},   {64, 0, 8, 8, 128},
                          {50, 300, 4, 2, 80}, {17, 100, 6, 1, 48}, {1, 0, 2, 1, 64},    {100, 400, 4, 4, 64}};
  uint32_t seed = 600;
  for (const Shape& s : shapes) check_attention(s, seed);
}

TEST_CASE("hip attention over a paged cache: several sequences per step, padding, f16 and q8_0 caches") {
  HIP_DEVICE_OR_SKIP();
  using Shape = test::AttentionShape;
  const ElemType f32 = ElemType::F32, f16 = ElemType::F16, q8 = ElemType::Q8_0;
  // Sequences on scrambled pages (test::attention_case): sequence i starts at start + 37 i, the first takes the
  // remainder of the tokens. Flash attention (>= 16 tokens) then has 16-row query tiles that span sequences.
  const Shape shapes[] = {
      {40, 10, 4, 2, 64, 3, f32, 0},     // prefill chunks of 3 sequences: tiles span sequence boundaries
      {45, 200, 8, 2, 128, 5, f32, 0},   // 5 chunks of 9 tokens: up to 3 sequences in one tile
      {24, 100, 8, 2, 128, 24, f32, 0},  // decode of 24 one-token sequences in one step (flash: 16 one-row runs)
      {6, 50, 4, 1, 64, 6, f32, 0},      // decode of 6 one-token sequences (split-K)
      {19, 3, 4, 2, 64, 16, f32, 0},     // a prefill chunk of 4 and 15 decode tokens of other sequences mixed
      {37, 5, 4, 2, 64, 2, f32, 5},      // two chunks, 5 padding tokens at the end (page-table row of the sink)
      {9, 20, 4, 2, 64, 2, f32, 3},      // split-K with padding
      {1, 200, 8, 2, 64, 1, f16, 0},     // f16 caches: decode,
      {7, 0, 6, 3, 96, 1, f16, 0},       //   a small batch,
      {50, 300, 4, 2, 80, 1, f16, 0},    //   prefill (flash),
      {33, 7, 4, 2, 128, 4, f16, 3},     //   several sequences and padding (flash),
      {8, 400, 4, 1, 64, 8, f16, 0},     //   8 decode sequences (split-K)
      // q8_0 caches (K/V rows whole blocks of 32; head_dim 40, 80 and 96 start heads inside blocks):
      {1, 200, 8, 2, 64, 1, q8, 0},      //   decode,
      {7, 0, 8, 4, 40, 1, q8, 0},        //   a small batch (split-K),
      {50, 300, 4, 4, 40, 1, q8, 0},     //   prefill (flash),
      {33, 7, 4, 2, 128, 4, q8, 3},      //   several sequences and padding (flash),
      {24, 100, 8, 2, 80, 24, q8, 0},    //   24 one-token sequences (flash, one-row runs),
      {8, 400, 6, 3, 96, 8, q8, 0},      //   8 decode sequences (split-K)
  };
  uint32_t seed = 650;
  for (const Shape& s : shapes) check_attention(s, seed);
}

TEST_CASE("hip gather rows: logit rows in any order, repeated") {
  HIP_DEVICE_OR_SKIP();
  for (int64_t width : {int64_t(7), int64_t(1000)}) {
    CAPTURE(width);
    const int64_t n = 9;
    const std::vector<int32_t> rows = {8, 0, 5, 5};
    OpCase c(n, 16);
    const BufferId in = c.input("x", n * width, 900);
    const BufferId logit_rows = c.plan.add_buffer("logit_rows", ElemType::I32, BufferRole::LogitRows,
                                                  int64_t(rows.size()));
    const BufferId out = c.output("y", int64_t(rows.size()) * width);
    c.add("logit_rows", GatherRowsOp{in, logit_rows, out, int64_t(rows.size()), width});
    StepArrays step = single_sequence_step(c.plan, c.tokens, 0);
    step.logit_rows = rows;
    c.step = std::move(step);
    compare(c, out, kExact, cat("gather ", rows.size(), " rows of ", width));
  }
}

TEST_CASE("hip persistent buffers (f32, f16, q8_0): a larger declaration keeps the contents and zeros the rest") {
  HIP_DEVICE_OR_SKIP();
  // What the cache holds for `values` (rows of whole q8_0 blocks): the values themselves for f32 and f16 (they are
  // exact in f16), their q8_0 round trip (engine/kv_q8.h) otherwise.
  auto stored = [](ElemType type, std::vector<float> values) {
    if (type != ElemType::Q8_0) return values;
    std::vector<uint32_t> blocks(values.size() / size_t(kKvQ8Block) * size_t(kKvQ8Words));
    kv_q8_quantize(values.data(), blocks.data(), int64_t(values.size()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = kv_q8_value(blocks.data(), int64_t(i));
    return values;
  };
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::Q8_0}) {
    const std::string type_name = elem_type_name(type);
    CAPTURE(type_name);
    const int64_t width = 32, small_rows = 4, large_rows = 10;  // a row: one q8_0 block
    auto hip = hip_backend();
    hip->load_weights({});
    // Values exact in f16: multiples of 1/8 in [-4, 4].
    std::vector<float> first(size_t(small_rows * width));
    for (size_t i = 0; i < first.size(); ++i) first[i] = float(int(i % 64) - 32) / 8.f;
    const std::vector<float> first_stored = stored(type, first);
    Plan small;
    const BufferId small_kv = small.add_buffer("blk.0.k_cache", type, BufferRole::Persistent, small_rows * width);
    auto small_prepared = hip->prepare(small);
    hip->write(*small_prepared, small_kv, 0, first);
    Plan large;
    const BufferId kv = large.add_buffer("blk.0.k_cache", type, BufferRole::Persistent, large_rows * width);
    const BufferId src = large.add_buffer("k", ElemType::F32, BufferRole::Scratch, 2 * width);
    const BufferId rows = large.add_buffer("kv_rows", ElemType::I32, BufferRole::KvRows, 2);
    large.ops.push_back({"k write", 0, KvWriteOp{src, kv, rows, 2, width, large_rows}});
    auto prepared = hip->prepare(large);
    // A plan prepared before the pool grew must not run again (the engine drops them): the backend refuses it.
    CHECK_THROWS_AS(hip->execute(*small_prepared, StepInput{}), Error);
    small_prepared.reset();
    std::vector<float> all(size_t(large_rows * width));
    hip->read(*prepared, kv, 0, all);
    for (size_t i = 0; i < all.size(); ++i)
      REQUIRE_MESSAGE(all[i] == (i < first.size() ? first_stored[i] : 0.f), "element ", i);
    // The enlarged buffer is the one the plan's ops use: write rows 9 and 2 through the plan.
    std::vector<float> k(size_t(2 * width));
    for (size_t i = 0; i < k.size(); ++i) k[i] = 0.5f + float(i);
    hip->write(*prepared, src, 0, k);
    StepArrays step;
    step.kv_rows = {9, 2};
    hip->execute(*prepared, step.view());
    hip->read(*prepared, kv, 0, all);
    const std::vector<float> k_stored = stored(type, k);
    for (int64_t i = 0; i < width; ++i) {
      CHECK(all[size_t(9 * width + i)] == k_stored[size_t(i)]);
      CHECK(all[size_t(2 * width + i)] == k_stored[size_t(width + i)]);
      CHECK(all[size_t(1 * width + i)] == first_stored[size_t(width + i)]);
    }
    // A range read inside the buffer (offset and count whole blocks) gives the same values.
    std::vector<float> part(size_t(2 * width));
    hip->read(*prepared, kv, 2 * width, part);
    for (int64_t i = 0; i < 2 * width; ++i) CHECK(part[size_t(i)] == all[size_t(2 * width + i)]);
    if (type == ElemType::Q8_0) {  // q8_0 ranges must be whole blocks
      std::vector<float> odd(8);
      CHECK_THROWS_AS(hip->read(*prepared, kv, 4, odd), Error);
      CHECK_THROWS_AS(hip->write(*prepared, kv, 0, odd), Error);
    }
  }
}

TEST_CASE("hip decode steps replayed from one captured graph: positions and page tables move, results follow") {
  HIP_DEVICE_OR_SKIP();
  // Decode plans (kv write + attention + matmul), executed at several positions on one prepared plan: the first
  // execute captures the graph, later ones replay it with new positions, KV rows, page tables and inputs. One
  // sequence (f32 cache), then 3 sequences and a padding token on pages scrambled anew every step (f16 cache).
  const int64_t ctx = 300, heads = 4, kv_heads = 2, head_dim = 64, kv_width = kv_heads * head_dim;
  for (int64_t n_seqs : {int64_t(1), int64_t(3)}) {
    CAPTURE(n_seqs);
    const int64_t n = n_seqs == 1 ? 1 : n_seqs + 1;
    const ElemType kv_type = n_seqs == 1 ? ElemType::F32 : ElemType::F16;
    OpCase c(n, ctx, n_seqs == 1 ? 1 : n_seqs + 1);
    const KvLayout& kv = c.plan.shape.kv;
    const int64_t rows = kv.cache_rows();
    const BufferId q = c.input("q", n * heads * head_dim, 1);
    const BufferId k = c.input("k", n * kv_width, 2);
    const BufferId v = c.input("v", n * kv_width, 3);
    const BufferId k_cache = c.input("k_cache", rows * kv_width, 4, 1.f, kv_type);
    const BufferId v_cache = c.input("v_cache", rows * kv_width, 5, 1.f, kv_type);
    const BufferId attn = c.output("attn", n * heads * head_dim);
    const BufferId out = c.output("out", n * 96);
    const WeightId w = c.weight("w", GgmlType::Q4_K, 96, heads * head_dim, 6);
    c.add("k write", KvWriteOp{k, k_cache, c.kv_rows, n, kv_width, rows});
    c.add("v write", KvWriteOp{v, v_cache, c.kv_rows, n, kv_width, rows});
    c.add("attention", AttentionOp{q, k_cache, v_cache, c.plan.positions, c.seq, c.page_table, attn, n, heads,
                                   kv_heads, head_dim, head_dim, c.plan.shape.n_seqs, kv.page_size, kv.pages_per_seq,
                                   rows, 0.125f});
    c.add("matmul", MatMulOp{attn, out, w, n, heads * head_dim, 96});
    auto cpu = cpu_backend();
    auto hip = hip_backend();
    auto cpu_plan = c.load_and_prepare(*cpu);
    auto hip_plan = c.load_and_prepare(*hip);
    std::mt19937 rng(7);
    uint32_t page_seed = 70;
    for (int64_t pos : {int64_t(0), int64_t(1), int64_t(255), int64_t(256), int64_t(257), int64_t(299)}) {
      CAPTURE(pos);
      if (n_seqs == 1) {
        c.start_pos = pos;
      } else {
        const std::vector<int64_t> lens(size_t(n_seqs), 1);
        const std::vector<int64_t> starts = {pos, (pos * 7 + 13) % ctx, ctx - 1 - pos};
        c.sequences(lens, starts, page_seed++);
      }
      for (auto& [id, values] : c.inputs)
        if (id == q || id == k || id == v)
          for (auto& x : values) x = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
      c.run(*cpu, *cpu_plan);
      c.run(*hip, *hip_plan);
      const auto want = c.read(*cpu, *cpu_plan, out), got = c.read(*hip, *hip_plan, out);
      const double e = test::nmse(got.data(), want.data(), got.size());
      CHECK_MESSAGE(e <= kF32, "graph replay at position ", pos, ": NMSE ", e);
    }
  }
}

TEST_CASE("hip swiglu, residual add, bias add") {
  HIP_DEVICE_OR_SKIP();
  for (int64_t rows : {int64_t(1), int64_t(3)})
    for (int64_t width : {int64_t(5), int64_t(1000)}) {
      CAPTURE(rows);
      CAPTURE(width);
      auto [c, out, x] = test::elementwise_case(rows, width);
      // swiglu's expf may differ from the CPU's by an ulp: the f32 limit, not bit identity.
      compare(c, out, kF32, cat("swiglu+add ", rows, "x", width));
      compare(c, x, kF32, cat("add+bias ", rows, "x", width));
    }
}

// ---- the ops of qwen3moe, gemma3, phi3 and gpt-oss (engine::OpFeature) -------------------------------------------

TEST_CASE("hip gated linear units: SiLU, tanh GELU, gpt-oss's clamped SwiGLU (gate and up past the limit)") {
  HIP_DEVICE_OR_SKIP();
  for (GluKind kind : {GluKind::SiLU, GluKind::GeluTanh, GluKind::SwiGluOai})
    for (int64_t n : {int64_t(5), int64_t(3000)}) {
      CAPTURE(glu_kind_name(kind));
      OpCase c(1, 8);
      const BufferId gate = c.input("gate", n, 710, 10.f), up = c.input("up", n, 711, 10.f);
      const BufferId out = c.output("out", n);
      c.add("glu", GluOp{gate, up, out, n, kind, 1.702f, 7.f});
      compare(c, out, kF32, cat("glu ", glu_kind_name(kind), " x", n));
    }
}

TEST_CASE("hip embedding with a scale (gemma3's sqrt(dim))") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 720;
  for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
    const std::string type_name = model::type_name(type);
    auto [c, out] = test::embed_case(type, seed);
    auto& e = std::get<EmbedOp>(c.plan.ops.back().op);
    e.scale = std::sqrt(float(e.dim));
    compare(c, out, kExact, cat("embed x sqrt(dim) ", type_name));
  }
}

TEST_CASE("hip rope scaling: YaRN ramp and attention factor") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 730;
  struct Yarn {
    float ext, attn, low, high;
  };
  for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
    for (const Yarn y : {Yarn{1.f, 1.f, 9.3f, 21.7f}, Yarn{0.5f, 1.3f, 0.f, 40.f}, Yarn{0.f, 0.8f, 0.f, 0.f}}) {
      auto [c, x] = test::rope_case(pairing, 64, false, false, seed);
      auto& r = std::get<RopeOp>(c.plan.ops.back().op);
      r.freq_scale = 0.125f;
      r.ext_factor = y.ext, r.attn_factor = y.attn, r.yarn_low = y.low, r.yarn_high = y.high;
      compare(c, x, kRope, cat("rope yarn ext ", y.ext, " attn ", y.attn, " pairing ", int(pairing)));
    }
}

TEST_CASE("hip attention with a sliding window and attention sinks: split-K and flash, paged, f16 and q8_0") {
  HIP_DEVICE_OR_SKIP();
  using Shape = test::AttentionShape;
  const ElemType f32 = ElemType::F32, f16 = ElemType::F16, q8 = ElemType::Q8_0;
  struct Case {
    Shape s;
    int64_t window;
    bool sinks;
  };
  // Windows shorter than, around and longer than the key ranges; starts past the window (tiles wholly before it are
  // skipped), windows that are not multiples of the 16-key tile or of the split size.
  const Case cases[] = {
      {{1, 200, 8, 2, 64}, 64, false},          {{1, 200, 8, 2, 64}, 0, true},
      {{1, 511, 4, 4, 64}, 300, true},          {{7, 90, 8, 2, 64}, 5, true},
      {{70, 3, 2, 1, 128}, 32, false},          {{70, 3, 2, 1, 128}, 17, true},
      {{50, 300, 4, 2, 80}, 100, true},         {{33, 40, 4, 1, 64}, 4096, true},
      {{45, 200, 8, 2, 128, 5, f32, 0}, 20, true}, {{24, 100, 8, 2, 64, 24, f16, 0}, 50, true},
      {{8, 400, 6, 3, 96, 8, q8, 0}, 128, true},   {{33, 7, 4, 2, 128, 4, q8, 3}, 9, true},
      {{64, 0, 8, 8, 64}, 1, true},
  };
  uint32_t seed = 740;
  for (const Case& k : cases) {
    const Shape& s = k.s;
    auto [c, out, k_cache] = test::attention_case(s, seed);
    auto& a = std::get<AttentionOp>(c.plan.ops.back().op);
    a.window = k.window;
    if (k.sinks) a.sinks = c.weight("sinks", GgmlType::F32, 1, s.heads, seed++, -1.f, 3.f);
    const bool flash = device().matrix_cores && s.n_tokens >= kFlashMinTokens && s.head_dim <= 256;
    compare(c, out, flash ? kMatrixCore : kF32,
            cat("attention ", s.n_tokens, " tokens at ", s.start_pos, " in ", s.n_seqs, " sequence(s), ", s.heads, "/",
                s.kv_heads, " heads of ", s.head_dim, ", ", elem_type_name(s.kv_type), ", window ", k.window,
                k.sinks ? ", sinks" : "", flash ? " flash" : " split-K"));
  }
}

namespace {

// Router logits -> MoeRouteOp -> (experts, weights); with `ties`, every token's logits take only 4 values, so the
// order among equal logits (the lower expert id first) decides.
struct MoeCase {
  OpCase c;
  BufferId logits, experts, weights;
};
MoeCase moe_route_case(int64_t n, int64_t n_experts, int64_t k, MoeGating gating, bool normalize, bool ties,
                       uint32_t seed) {
  MoeCase m{OpCase(n, std::max<int64_t>(n, 8)), {}, {}, {}};
  m.logits = m.c.input("logits", n * n_experts, seed, 3.f);
  if (ties)
    for (float& v : m.c.inputs[m.logits]) v = std::floor(v * 0.6f);
  m.experts = m.c.plan.add_buffer("experts", ElemType::I32, BufferRole::Scratch, n * k);
  m.weights = m.c.output("weights", n * k);
  m.c.add("route", MoeRouteOp{m.logits, m.experts, m.weights, n, n_experts, k, gating, normalize});
  return m;
}

}  // namespace

TEST_CASE("hip moe routing: both gatings, normalized or not, ties go to the lower expert id") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 800;
  struct Shape {
    int64_t n, experts, k;
  };
  for (const Shape sh : {Shape{1, 8, 2}, Shape{9, 32, 4}, Shape{70, 128, 8}, Shape{3, 5, 5}})
    for (MoeGating gating : {MoeGating::SoftmaxTopK, MoeGating::TopKSoftmax})
      for (bool normalize : {false, true})
        for (bool ties : {false, true}) {
          const std::string what = cat("moe route ", sh.n, " tokens, top ", sh.k, " of ", sh.experts,
                                       gating == MoeGating::SoftmaxTopK ? " softmax-topk" : " topk-softmax",
                                       normalize ? " normalized" : "", ties ? " ties" : "");
          auto m = moe_route_case(sh.n, sh.experts, sh.k, gating, normalize, ties, seed++);
          compare(m.c, m.experts, kExact, what + ": experts");
          compare(m.c, m.weights, kF32, what + ": weights");
        }
}

TEST_CASE("hip moe expert matmuls: every weight type, decode (matvec) and grouped GEMM, biases, combine") {
  HIP_DEVICE_OR_SKIP();
  uint32_t seed = 900;
  struct Shape {
    int64_t n, experts, k;
  };
  for (GgmlType type : test::k_all_weight_types) {
    const std::string type_name = model::type_name(type);
    const int64_t cols = test::matmul_row_lengths(type)[1];
    // 1 and 5 tokens: matvec; 9: the smallest GEMM; 130 tokens of 2 of 4 experts: several 64-slot tiles per expert.
    for (const Shape sh : {Shape{1, 8, 2}, Shape{5, 16, 4}, Shape{9, 8, 2}, Shape{130, 4, 2}, Shape{67, 32, 4}})
      for (bool per_slot : {false, true}) {
        const bool bias = per_slot;
        const int64_t rows = 37 + (sh.n % 3) * 32;
        auto m = moe_route_case(sh.n, sh.experts, sh.k, MoeGating::SoftmaxTopK, true, false, seed++);
        OpCase& c = m.c;
        const BufferId in = c.input("x", sh.n * (per_slot ? sh.k : 1) * cols, seed++);
        const BufferId out = c.output("y", sh.n * sh.k * rows);
        const WeightId w = c.weight("w", type, sh.experts * rows, cols, seed++);
        const WeightId b = bias ? c.weight("b", GgmlType::F32, sh.experts, rows, seed++) : kNoWeight;
        c.add("experts", MoeMatMulOp{in, m.experts, out, w, b, sh.n, sh.k, cols, rows, sh.experts, per_slot});
        const BufferId sum = c.output("sum", sh.n * rows);
        c.add("combine", MoeCombineOp{out, m.weights, sum, sh.n, sh.k, rows});
        const bool gemm = device().matrix_cores && type != GgmlType::F32 && sh.n > kMatvecTokens;
        const std::string what = cat("moe matmul ", type_name, " ", sh.n, " tokens, top ", sh.k, " of ", sh.experts,
                                     ", ", cols, "->", rows, per_slot ? " per-slot input, bias" : "",
                                     gemm ? " grouped gemm" : " matvec");
        compare(c, out, gemm ? kMatrixCore : kF32, what);
        compare(c, sum, gemm ? kMatrixCore : kF32, what + " + combine");
      }
  }
}

// Prints one golden line (the GPU logs are read as they come), checks it; 1 when it passed.
static int check_golden(const std::string& summary, const test::GoldenResult& r) {
  const std::string line = summary + (r.ok() ? "" : "  <-- FAIL");
  std::printf("golden %s\n", line.c_str());
  INFO(line);
  CHECK(r.tokenization_ok);
  CHECK(r.worst_row_nmse <= r.limit);
  CHECK(r.greedy_ok);
  return r.ok() ? 1 : 0;
}

TEST_CASE("hip golden: every model and prompt matches llama.cpp like the CPU reference does") {
  HIP_DEVICE_OR_SKIP();
  const auto files = test::golden_json_files("hip");
  REQUIRE(files.size() >= test::golden_min(44));
  std::set<std::string> models;
  int passed = 0;
  for (const std::string& file : files) {
    const test::GoldenCase g = test::load_golden(file);
    models.insert(g.model_path);
    const test::GoldenResult r = test::run_golden(g, hip_backend());
    passed += check_golden(cat(g.name, ": worst row NMSE ", r.worst_row_nmse, " (row ", r.worst_row, ", limit ", r.limit,
                               "), overall ", r.overall_nmse, ", greedy equal for ", r.greedy_compared, "/",
                               g.greedy_tokens.size(), " steps"),
                           r);
  }
  std::printf("golden: %d/%zu passed\n", passed, files.size());
  std::fflush(stdout);
  CHECK(models.size() >= test::golden_min(22));
}

TEST_CASE("hip golden: both prompts of every model as concurrent sequences beside six others, f32, f16, q8_0 KV") {
  HIP_DEVICE_OR_SKIP();
  // Multi-sequence steps end to end (tests/engine/golden_run.h): sequences join and leave at different steps,
  // prefill chunks and decode tokens share steps, the page pool is shared; each golden sequence is scored as alone.
  const auto by_model = test::golden_cases_by_model("hip");
  REQUIRE(by_model.size() >= test::golden_min(22));
  int passed = 0, total = 0;
  // q8_0 where the model's K/V rows are whole blocks of 32 (test::kv_types_for), with kv_nmse_limit's limit.
  for (const auto& [model_path, cases] : by_model)
    for (ElemType kv : test::kv_types_for(model_path)) {
      const std::vector<test::GoldenResult> results = test::run_golden_batched(cases, hip_backend(), kv);
      for (size_t i = 0; i < cases.size(); ++i) {
        const test::GoldenResult& r = results[i];
        passed += check_golden(cat(cases[i].name, " batched, ", elem_type_name(kv), " KV: worst row NMSE ",
                                   r.worst_row_nmse, " (limit ", r.limit, "), greedy ", r.greedy_compared, "/",
                                   cases[i].greedy_tokens.size()),
                               r);
        ++total;
      }
    }
  std::printf("golden batched: %d/%d passed\n", passed, total);
  std::fflush(stdout);
}

TEST_CASE("hip verify: no op diverges from the CPU reference on the shared models") {
  HIP_DEVICE_OR_SKIP();
  // 10 tokens: prefill 8 (matvec, split-K attention) + 2 decode steps; 40 tokens: prefill 38 (GEMM, flash attention
  // on models without F32 matrices).
  std::vector<TokenId> long_tokens;
  for (int i = 0; i < 40; ++i) long_tokens.push_back(TokenId(1 + (i * 37) % 250));
  // next/: MoE (route, expert matvec / grouped GEMM, combine), sliding windows, sinks, GeGLU, YaRN, MXFP4.
  for (const char* name : {"stories260K.gguf", "stories260K-f16.gguf", "synth-llama-d256-q4_k_m.gguf",
                           "synth-qwen2-d256-q8_0.gguf", "synth-qwen3-d256-q4_k_m.gguf",
                           "synth-llama-tied-d256-q8_0.gguf", "synth-llama-d256-bf16.gguf",
                           "next/synth-qwen3moe-d128-q8_0.gguf", "next/synth-gemma3-d128-q8_0.gguf",
                           "next/synth-phi3-d256-q4_k_m.gguf", "next/synth-gptoss-d128-q8_0.gguf",
                           "next/synth-gptoss-d128-mxfp4.gguf"}) {
    const std::string rel = name;
    const std::string path = test::shared_path(rel.rfind("next/", 0) == 0 ? "next/models/" + rel.substr(5)
                                                                          : "models/" + rel);
    if (!exists(path)) continue;
    auto file = model::GgufFile::open(path);
    const auto config = model::ModelConfig::from_gguf(file);
    const auto weights = map_weights(file, config);
    // Only F32 matrices (stories260K): every kernel runs in fp32 and differs from the CPU only in summation order
    // (~1e-13). Any other matrix takes the matrix-core GEMM (and grouped expert GEMM) for 40 tokens, which rounds
    // its operands to fp16 (~1e-7 per op, limit as in the op tests), whatever F32 tensors (router, expert biases)
    // the model also has.
    bool f32_only = true;
    for (const auto& t : file.tensors())
      if (t.dims.size() >= 2 && t.type != GgmlType::F32) f32_only = false;
    const double limit = device().matrix_cores && !f32_only ? kMatrixCore : 1e-7;
    std::vector<TokenId> short_tokens = {1, 15, 42, 7, 300, 99, 5, 250, 11, 3};
    for (std::vector<TokenId>* toks : {&short_tokens, &long_tokens}) {
      const std::string model_name = cat(name, " (", toks->size(), " tokens)");
      CAPTURE(model_name);
      auto hip = hip_backend();
      auto cpu = cpu_backend();
      const VerifyReport report = verify(config, weights, *hip, *cpu, *toks, VerifyOptions{.max_nmse = limit});
      const std::string line = model_name + ": " + report.summary();
      std::printf("verify %s\n", line.c_str());
      std::fflush(stdout);
      CHECK_MESSAGE(report.ok(), line);
    }
  }
}
