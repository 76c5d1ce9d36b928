// Every op of the Vulkan backend against the CPU reference backend, through the engine's backend interface: small
// plans of one or two ops on random inputs (odd sizes included), every weight type, every matmul kernel the device
// has. Errors are NMSE = sum (vk - cpu)^2 / sum cpu^2 over the op's output, with a limit per op and kernel:
//   exact-arithmetic ops (embedding, kv write, elementwise)           1e-12 (bit-identical decoders; f32 ops)
//   f32 reductions in another order (matvec, tiled matmul, rmsnorm,    1e-9
//   attention)
//   rope (f32 angles vs the CPU's f64: |theta| error ~ 1e-7 * theta)    1e-8
//   cooperative-matrix matmul (f16 operands, f32 accumulation)         2e-6
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/backend.h"
#include "engine/op_case.h"
#include "engine/plan.h"
#include "model/quants.h"
#include "test_util.h"
#include "vk/backend/vk_backend.h"

using namespace greta;
using namespace greta::engine;
using model::GgmlType;

namespace {

std::unique_ptr<Backend> vk_backend(vk::MatmulKernel kernel = vk::MatmulKernel::automatic) {
  vk::VkBackendOptions options;
  options.matmul = kernel;
  return vk::create_vk_backend(options);
}

// Runs `c` on the CPU and on Vulkan and checks the NMSE of `out` against `limit`, or against `coopmat_limit` when
// the backend chose a cooperative-matrix kernel (f16 operands) for some op. Returns the NMSE.
double compare(OpCase& c, BufferId out, double limit, vk::MatmulKernel kernel = vk::MatmulKernel::automatic,
               double coopmat_limit = 2e-6) {
  cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
  const auto want = c.run_once(cpu, out);
  auto vk = vk_backend(kernel);
  auto prepared = c.load_and_prepare(*vk);
  c.run(*vk, *prepared);
  const auto got = c.read(*vk, *prepared, out);
  const std::string kernels = vk::describe_kernels(*prepared);
  if (kernels.find("coopmat") != std::string::npos) limit = coopmat_limit;
  REQUIRE(got.size() == want.size());
  const double e = test::nmse(got.data(), want.data(), got.size());
  CHECK_MESSAGE(e <= limit, "NMSE ", e, " > ", limit, " with ", kernels);
  CHECK(vk::validation_messages(*vk).empty());
  return e;
}

constexpr GgmlType k_all_types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                                    GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                                    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

bool device_has_coopmat() {
  // The automatic choice reports it: a 64-token matmul on a coopmat device uses matmul_coopmat_*.
  OpCase c(64, 64);
  const BufferId in = c.input("x", 64 * 64, 1);
  const BufferId out = c.output("y", 64 * 32);
  const WeightId w = c.weight("w", GgmlType::F16, 32, 64, 2);
  c.add("mm", MatMulOp{in, out, w, 64, 64, 32});
  auto vk = vk_backend();
  auto prepared = c.load_and_prepare(*vk);
  return vk::describe_kernels(*prepared).find("coopmat") != std::string::npos;
}

}  // namespace

TEST_CASE("vk matmul: every weight type, decode and prefill shapes, every kernel, against the CPU") {
  const bool coopmat = device_has_coopmat();
  const std::string note = std::string("cooperative-matrix matmul on this device: ") + (coopmat ? "yes" : "no");
  MESSAGE(note);
  std::vector<vk::MatmulKernel> kernels = {vk::MatmulKernel::automatic, vk::MatmulKernel::tiled,
                                           vk::MatmulKernel::matvec};
  if (coopmat) kernels.push_back(vk::MatmulKernel::coopmat);
  uint32_t seed = 100;
  for (GgmlType type : k_all_types) {
    const int64_t block = model::traits(type).block_elems;
    // Two row lengths per type: for f32/f16/bf16 one that is not a multiple of 4 (the matvec tail path).
    const int64_t cols_list[2] = {block == 1 ? 13 : 2 * block, block == 1 ? 200 : (block == 32 ? 96 : 512)};
    for (int64_t cols : cols_list)
      for (int64_t n : {int64_t(1), int64_t(5), int64_t(67)})
        for (vk::MatmulKernel kernel : kernels) {
          const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
          CAPTURE(cols);
          CAPTURE(n);
          CAPTURE(int(kernel));
          const int64_t rows = 37 + (n % 3) * 64;  // 37 or 165: partial tiles and odd workgroup counts
          OpCase c(n, std::max<int64_t>(n, 8));
          const BufferId in = c.input("x", n * cols, seed++);
          const BufferId out = c.output("y", n * rows);
          const WeightId w = c.weight("w", type, rows, cols, seed++);
          c.add("matmul", MatMulOp{in, out, w, n, cols, rows});
          compare(c, out, 1e-9, kernel);
        }
  }
}

TEST_CASE("vk embedding lookup: every weight type, bit-identical to the CPU") {
  uint32_t seed = 300;
  for (GgmlType type : k_all_types) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    const int64_t block = model::traits(type).block_elems;
    const int64_t dim = block == 1 ? 19 : (block == 32 ? 96 : 256), vocab = 57, n = 9;
    OpCase c(n, 16);
    const WeightId table = c.weight("token_embd", type, vocab, dim, seed++);
    const BufferId out = c.output("x", n * dim);
    std::mt19937 rng(seed++);
    for (auto& t : c.tokens) t = int32_t(rng() % uint32_t(vocab));
    c.tokens.back() = int32_t(vocab - 1);
    c.add("embed", EmbedOp{table, c.plan.tokens, out, n, dim});
    compare(c, out, 1e-12);
  }
}

TEST_CASE("vk rmsnorm: odd widths, row offsets, in place") {
  uint32_t seed = 400;
  for (int64_t width : {int64_t(7), int64_t(64), int64_t(1031), int64_t(4096)})
    for (int64_t offset : {int64_t(0), int64_t(2)}) {
      CAPTURE(width);
      CAPTURE(offset);
      const int64_t rows = 5;
      OpCase c(1, 8);
      const BufferId in = c.input("x", (rows + offset) * width, seed++, 3.f);
      const WeightId w = c.weight("norm", GgmlType::F32, 1, width, seed++, 0.5f, 1.5f);
      const BufferId out = offset == 0 ? in : c.output("y", rows * width);  // in place when there is no offset
      c.add("norm", RmsNormOp{in, out, w, rows, width, offset, 1e-5f});
      compare(c, out, 1e-9);
    }
}

TEST_CASE("vk rope: both pairings, partial rotary dims, frequency factors, large positions") {
  uint32_t seed = 500;
  for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
    for (int64_t head_dim : {int64_t(64), int64_t(128)})
      for (bool partial : {false, true})
        for (bool factors : {false, true}) {
          CAPTURE(int(pairing));
          CAPTURE(head_dim);
          CAPTURE(partial);
          CAPTURE(factors);
          const int64_t n = 7, heads = 3, rope_dims = partial ? head_dim / 2 : head_dim;
          OpCase c(n, 4096);
          c.start_pos = 3000;
          const BufferId x = c.input("q", n * heads * head_dim, seed++);
          const WeightId ff = factors ? c.weight("rope_freqs", GgmlType::F32, 1, rope_dims / 2, seed++, 1.f, 8.f)
                                      : kNoWeight;
          c.add("rope", RopeOp{x, c.plan.positions, n, heads, head_dim, rope_dims, pairing, 500000.f, 0.5f, ff});
          compare(c, x, 1e-8);
        }
}

TEST_CASE("vk kv write + attention: prefill and decode, GQA and MQA, head dims 64/128/odd") {
  struct Shape {
    int64_t n_tokens, start_pos, heads, kv_heads, head_dim;
  };
  const Shape shapes[] = {{7, 0, 8, 2, 64},   {1, 90, 8, 2, 64},  {33, 40, 4, 1, 128},
                          {1, 200, 4, 4, 40}, {70, 3, 2, 1, 256}, {1, 511, 6, 3, 96}};
  uint32_t seed = 600;
  for (const Shape& s : shapes) {
    CAPTURE(s.n_tokens);
    CAPTURE(s.start_pos);
    CAPTURE(s.heads);
    CAPTURE(s.kv_heads);
    CAPTURE(s.head_dim);
    const int64_t ctx = 512, kv_width = s.kv_heads * s.head_dim;
    OpCase c(s.n_tokens, ctx);
    c.start_pos = s.start_pos;
    const BufferId q = c.input("q", s.n_tokens * s.heads * s.head_dim, seed++);
    const BufferId k = c.input("k", s.n_tokens * kv_width, seed++);
    const BufferId v = c.input("v", s.n_tokens * kv_width, seed++);
    // The cache as earlier steps left it: random rows everywhere (only rows <= each position may be read).
    const BufferId k_cache = c.input("k_cache", ctx * kv_width, seed++);
    const BufferId v_cache = c.input("v_cache", ctx * kv_width, seed++);
    const BufferId out = c.output("attn", s.n_tokens * s.heads * s.head_dim);
    c.add("k write", KvWriteOp{k, k_cache, c.plan.positions, s.n_tokens, kv_width, ctx});
    c.add("v write", KvWriteOp{v, v_cache, c.plan.positions, s.n_tokens, kv_width, ctx});
    c.add("attention", AttentionOp{q, k_cache, v_cache, c.plan.positions, out, s.n_tokens, s.heads, s.kv_heads,
                                   s.head_dim, s.head_dim, ctx, 1.f / std::sqrt(float(s.head_dim))});
    compare(c, out, 1e-9);
    compare(c, k_cache, 1e-12);
  }
}

TEST_CASE("vk swiglu, residual add, bias add") {
  for (int64_t rows : {int64_t(1), int64_t(3)})
    for (int64_t width : {int64_t(5), int64_t(1000)}) {
      CAPTURE(rows);
      CAPTURE(width);
      OpCase c(1, 8);
      const BufferId gate = c.input("gate", rows * width, 700, 6.f);
      const BufferId up = c.input("up", rows * width, 701);
      const BufferId out = c.output("ffn", rows * width);
      const BufferId x = c.input("x", rows * width, 702);
      const WeightId bias = c.weight("bias", GgmlType::F32, 1, width, 703);
      c.add("swiglu", SwiGluOp{gate, up, out, rows * width});
      c.add("residual", AddOp{x, out, rows * width});
      c.add("bias", AddBiasOp{x, bias, rows, width});
      compare(c, out, 1e-12);
      compare(c, x, 1e-12);
    }
}
