// What the Vulkan op tests share (vk_ops_test.cpp, vk_decode_attention_test.cpp, vk_fusion_test.cpp): a backend with
// chosen kernels, and the comparison of one op case's output against the CPU reference backend.
// Errors are NMSE = sum (vk - cpu)^2 / sum cpu^2 over the op's output, with a limit per op and kernel:
//   exact-arithmetic ops (embedding, kv write, elementwise)           1e-12 (bit-identical decoders; f32 ops)
//   f32 reductions in another order (matvec, tiled matmul, rmsnorm,    1e-9
//   attention)
//   rope (f32 angles vs the CPU's f64: |theta| error ~ 1e-7 * theta)    1e-8
//   cooperative-matrix matmul (f16 operands, f32 accumulation)         2e-6
//   int8-activation decode matvec (quantize_q8 + matvec_q8_<type>)      2e-4 against the f32 product (the inputs'
//   and the int8 GEMM of batched steps (matmul_coopmat_q8_<type>)
//     int8 rounding: measured up to 2.4e-5 on uniform inputs, 1e-4 on swiglu products, whose heavier tails make
//     larger block maxima); a dedicated test in vk_ops_test.cpp holds it to the exact bound of that rounding and to 1e-6
//     against a CPU emulation of the int8 path
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string_view>
#include <variant>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/backend.h"
#include "engine/op_case.h"
#include "engine/op_cases.h"
#include "engine/plan.h"
#include "model/quants.h"
#include "test_util.h"
#include "vk_test_util.h"
#include "vk_shared_device.h"
#include "vk/backend/vk_backend.h"

namespace greta::vk::test {

using namespace greta::engine;
using model::GgmlType;

inline constexpr double k_q8_limit = 2e-4;  // NMSE of the int8-activation matvecs against the f32 product

inline bool has(const std::string& kernels, const char* what) { return kernels.find(what) != std::string::npos; }

inline std::unique_ptr<Backend> vk_backend(vk::MatmulKernel kernel = vk::MatmulKernel::automatic, bool q8 = true) {
  vk::VkBackendOptions options;
  options.matmul = kernel;
  options.q8_activations = q8;
  return test_backend(options);
}

// Runs `c` on the CPU and on Vulkan and checks the NMSE of `out` against `limit`, or against `coopmat_limit` when
// the backend chose a cooperative-matrix kernel (f16 operands) for some op, or k_q8_limit for int8 activations.
// `q8`: VkBackendOptions::q8_activations. Returns the NMSE.
inline double compare(OpCase& c, BufferId out, double limit, vk::MatmulKernel kernel = vk::MatmulKernel::automatic,
               double coopmat_limit = 2e-6, std::string* kernels_out = nullptr, bool q8 = true) {
  cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
  const auto want = c.run_once(cpu, out);
  auto vk = vk_backend(kernel, q8);
  auto prepared = c.load_and_prepare(*vk);
  c.run(*vk, *prepared);
  const auto got = c.read(*vk, *prepared, out);
  const std::string kernels = vk::describe_kernels(*prepared);
  if (kernels_out) *kernels_out = kernels;
  if (kernels.find("coopmat") != std::string::npos) limit = coopmat_limit;
  if (has(kernels, "matvec_q8") || has(kernels, "coopmat_q8")) limit = std::max(limit, k_q8_limit);
  if (!q8) {
    CHECK_MESSAGE(!has(kernels, "matvec_q8"), kernels);
    CHECK_MESSAGE(!has(kernels, "quantize_q8"), kernels);
    CHECK_MESSAGE(!has(kernels, "int8"), kernels);
  }
  REQUIRE(got.size() == want.size());
  const double e = greta::test::nmse(got.data(), want.data(), got.size());
  CHECK_MESSAGE(e <= limit, "NMSE ", e, " > ", limit, " with ", kernels);
  CHECK(vk::validation_messages(*vk).empty());
  return e;
}


// A decode step of `s` (a few tokens, or s.decode: one token per sequence) and its output projection of 67 rows in
// `projection`, both against the CPU (`q8`: VkBackendOptions::q8_activations); the kernels Vulkan ran, which must
// include the attention kernel merging its own key splits.
inline std::string check_decode_step(const greta::test::AttentionShape& s, GgmlType projection, uint32_t& seed,
                                     bool q8 = true) {
  auto [c, attn, k_cache] = greta::test::attention_case(s, seed);
  const int64_t width = s.heads * s.head_dim, rows = 67;
  const WeightId w = c.weight("attn_output", projection, rows, width, seed++);
  const BufferId y = c.output("y", s.n_tokens * rows);
  c.add("attn_output", MatMulOp{attn, y, w, s.n_tokens, width, rows});
  std::string kernels;
  compare(c, y, 1e-9, vk::MatmulKernel::automatic, 2e-6, &kernels, q8);
  compare(c, attn, 1e-9, vk::MatmulKernel::automatic, 2e-6, nullptr, q8);
  CHECK_MESSAGE(has(kernels, "merged by the last"), kernels);
  return kernels;
}

inline bool device_has_coopmat() {
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

// Checks `out` as compare does and returns the kernels the backend chose.
inline std::string compare_fused(OpCase& c, BufferId out, double limit, bool q8 = true) {
  std::string kernels;
  compare(c, out, limit, vk::MatmulKernel::automatic, 2e-6, &kernels, q8);
  return kernels;
}

}  // namespace greta::vk::test
