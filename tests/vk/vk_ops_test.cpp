// Every op of the Vulkan backend against the CPU reference backend, through the engine's backend interface: small
// plans of one or two ops on random inputs (odd sizes included), every weight type, every matmul kernel the device
// has. Errors (NMSE) and their limits per op and kernel: vk_ops_compare.h. The decode fusions: vk_fusion_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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
#include "vk_ops_compare.h"
#include "vk_test_util.h"
#include "vk/backend/tuning.h"
#include "vk/backend/vk_backend.h"
#include "vk/instance.h"

using namespace greta;
using namespace greta::engine;
using model::GgmlType;
using namespace greta::vk::test;



TEST_CASE("vk matmul: every weight type, decode and prefill shapes, every kernel, against the CPU") {
  const bool coopmat = device_has_coopmat();
  const std::string note = std::string("cooperative-matrix matmul on this device: ") + (coopmat ? "yes" : "no");
  MESSAGE(note);
  std::vector<vk::MatmulKernel> kernels = {vk::MatmulKernel::automatic, vk::MatmulKernel::tiled,
                                           vk::MatmulKernel::matvec};
  if (coopmat) kernels.push_back(vk::MatmulKernel::coopmat);
  uint32_t seed = 100;
  for (GgmlType type : test::k_all_weight_types) {
    const std::string type_name = model::type_name(type);
    for (int64_t cols : test::matmul_row_lengths(type))
      for (int64_t n : {int64_t(1), int64_t(5), int64_t(12), int64_t(67)})  // 12: 4 tokens per matvec workgroup
        for (vk::MatmulKernel kernel : kernels)
          for (bool q8 : {true, false}) {
            if (!q8 && kernel == vk::MatmulKernel::tiled) continue;  // q8 only changes the matvecs
            if (!q8 && kernel == vk::MatmulKernel::coopmat) continue;
            // The automatic choice at the two ends (one token: a matvec; 67: the GEMM); the middle sizes run
            // every kernel explicitly.
            if (kernel == vk::MatmulKernel::automatic && n != 1 && n != 67) continue;
            CAPTURE(type_name);
            CAPTURE(cols);
            CAPTURE(n);
            CAPTURE(int(kernel));
            CAPTURE(q8);
            auto [c, out] = test::matmul_case(type, n, cols, seed);
            compare(c, out, 1e-9, kernel, 2e-6, nullptr, q8);
          }
  }
}

// matvec_block with several tokens per workgroup: every rows x tokens pair of its accumulators (2, 4 and 8 rows
// forced through GRETA_VK_MATVEC where rows x tokens <= 16; 8 tokens in one workgroup on Q8_0 and Q4_K's f32 form,
// the 32-element-slot int8 types taking 4), partial row groups (37 and 101 rows), int8 activations (and f32 ones for
// Q4_K), and the automatic 4 rows of a long matrix (8197 rows, Q4_0 and Q4_K at 2 and 4 tokens).
TEST_CASE("vk multi-token matvec: every rows-per-workgroup at 2, 4 and 8 tokens matches the CPU") {
  uint32_t seed = 1500;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K})
    for (int64_t n : {int64_t(2), int64_t(4), int64_t(8)})
      for (int64_t rows : {int64_t(2), int64_t(4), int64_t(8), int64_t(0)})  // 0: the automatic choice
        for (bool q8 : {true, false}) {
          const bool four_rows_auto = type == GgmlType::Q4_0 || type == GgmlType::Q4_K;
          if (rows * n > 16 || (!q8 && type != GgmlType::Q4_K)) continue;  // the f32 form: one type of it
          if (rows == 0 && (n == 8 || !q8 || !four_rows_auto)) continue;
          const std::string type_name = model::type_name(type);
          CAPTURE(type_name);
          CAPTURE(n);
          CAPTURE(rows);
          CAPTURE(q8);
          const ScopedEnv env("GRETA_VK_MATVEC", rows ? cat("128x", rows).c_str() : nullptr);
          const int64_t out_rows = rows ? (n == 4 ? 101 : 37) : 8197;
          auto [c, out] = test::matmul_case(type, n, model::traits(type).block_elems == 32 ? 96 : 256, seed, out_rows);
          std::string kernels;
          compare(c, out, 1e-9, vk::MatmulKernel::matvec, 2e-6, &kernels, q8);
          // The int8 matvecs with 32-element slots (Q4_0, Q4_K, Q6_K here) take at most 4 tokens per workgroup.
          const bool wide_q8 = q8 && type != GgmlType::Q8_0 && has(kernels, "matvec_q8");
          const int64_t per_group = wide_q8 ? std::min<int64_t>(n, 4) : n;
          const std::string expect = cat(per_group, " tokens x ", rows ? rows : 4, " rows per workgroup");
          CHECK_MESSAGE(has(kernels, expect.c_str()), kernels);
        }
}

// The int8 path exactly: quantize_q8.comp rounds each input element to d * code (d = max |x| / 127 per 32-element
// block), so the result differs from the exact product by at most sum_blocks (d / 2) * sum |w| per output (checked
// per element against a double-precision product), and equals the product with the rounded input (a CPU emulation
// of the quantizer, in double) up to f32 arithmetic: NMSE 1e-6, where a wrong rounding or scale gives ~1e-5.
TEST_CASE("vk int8-activation matvec: within the rounding bound of the exact product, equal to a CPU emulation") {
  uint32_t seed = 1200;
  int q8_cases = 0;
  for (GgmlType type : test::k_all_weight_types) {
    if (model::traits(type).block_elems == 1) continue;  // f32/f16/bf16 keep f32 activations
    // Legacy types also at 128 columns: int8 rows of whole 16-byte words take 16-byte loads (matvec_block.comp's
    // MV_RUN4; the K-quants' lengths are such rows already).
    std::vector<int64_t> lengths;
    for (int64_t cols : test::matmul_row_lengths(type)) lengths.push_back(cols);
    if (model::traits(type).block_elems == 32) lengths.push_back(128);
    for (int64_t cols : lengths)
      for (int64_t n : {int64_t(1), int64_t(6), int64_t(8)}) {  // 2 and 8 tokens per workgroup
        const std::string type_name = model::type_name(type);
        CAPTURE(type_name);
        CAPTURE(cols);
        CAPTURE(n);
        auto [c, out] = test::matmul_case(type, n, cols, seed);
        const auto& op = std::get<MatMulOp>(c.plan.ops.at(0).op);
        // The matvec kernel forced: with cooperative matrices the automatic choice sends 6 and 8 tokens to the GEMM
        // (the test then stopped at its first such case on the H200, taking it for a device without the int8 path).
        auto vk = vk_backend(vk::MatmulKernel::matvec);
        auto prepared = c.load_and_prepare(*vk);
        c.run(*vk, *prepared);
        const auto got = c.read(*vk, *prepared, out);
        CHECK(vk::validation_messages(*vk).empty());
        if (vk::describe_kernels(*prepared).find("matvec_q8") == std::string::npos) {
          MESSAGE("no integer dot products on this device: the int8 path is not used");
          return;
        }
        ++q8_cases;
        const int64_t rows = op.out_features;
        std::vector<float> w(size_t(rows * cols));
        const uint64_t row_bytes = model::row_bytes(type, uint64_t(cols));
        for (int64_t r = 0; r < rows; ++r)
          model::dequantize_row(type, c.weight_bytes.at(0).data() + uint64_t(r) * row_bytes, &w[size_t(r * cols)], cols);
        const std::vector<float>& x = c.inputs.at(op.in);
        std::vector<float> emulated(got.size());
        for (int64_t t = 0; t < n; ++t) {
          const float* xt = &x[size_t(t * cols)];
          std::vector<double> xq(static_cast<size_t>(cols));
          std::vector<double> half_step(static_cast<size_t>(cols));  // d / 2 of the element's block
          for (int64_t b = 0; b < cols; b += 32) {
            float m = 0.f;
            for (int64_t i = b; i < b + 32; ++i) m = std::max(m, std::fabs(xt[i]));
            const float inv = m > 0.f ? 127.f / m : 0.f, d = m / 127.f;
            for (int64_t i = b; i < b + 32; ++i) {
              xq[size_t(i)] = double(d) * std::clamp(std::nearbyint(xt[i] * inv), -127.f, 127.f);
              half_step[size_t(i)] = double(m) / 254.0;
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            double exact = 0, with_q8 = 0, bound = 0, magnitude = 0;
            for (int64_t i = 0; i < cols; ++i) {
              const double wi = w[size_t(r * cols + i)];
              exact += wi * xt[i];
              with_q8 += wi * xq[size_t(i)];
              bound += std::fabs(wi) * half_step[size_t(i)];
              magnitude += std::fabs(wi * xt[i]);
            }
            const size_t at = size_t(t * rows + r);
            emulated[at] = float(with_q8);
            const double err = std::fabs(double(got[at]) - exact);
            CHECK_MESSAGE(err <= bound * 1.001 + 1e-5 * magnitude + 1e-6, "row ", r, " token ", t, ": |", got[at],
                          " - ", exact, "| > bound ", bound);
          }
        }
        const double e = test::nmse(got.data(), emulated.data(), got.size());
        CHECK_MESSAGE(e <= 1e-6, "NMSE against the emulated int8 path ", e);
      }
  }
  CHECK(q8_cases == 99);  // (13 quantized types x 2 row lengths + 7 legacy types at 128 columns) x 3 token counts
}

// Unset, VkBackendOptions::q8_activations follows the device's accelerated packed dot product (lavapipe emulates it:
// its decode steps ran 3x slower on int8 activations); true forces them wherever shaderIntegerDotProduct exists.
TEST_CASE("vk int8 activations: by default where the packed int8 dot product is accelerated, else when asked") {
  const std::vector<vk::DeviceInfo> devices = vk::list_devices();
  const int index = vk::pick_default_device(devices);
  REQUIRE(index >= 0);
  const vk::DeviceInfo& info = devices[size_t(index)];
  CAPTURE(info.name);
  vk::VkBackendOptions options;
  CHECK(vk::uses_int8_activations(*vk::test::test_backend(options)) ==
        (info.integer_dot_product && info.integer_dot_product_accelerated));
  options.q8_activations = true;
  CHECK(vk::uses_int8_activations(*vk::test::test_backend(options)) == info.integer_dot_product);
  options.q8_activations = false;
  CHECK(!vk::uses_int8_activations(*vk::test::test_backend(options)));
}

TEST_CASE("vk embedding lookup: every weight type, bit-identical to the CPU") {
  uint32_t seed = 300;
  for (GgmlType type : test::k_all_weight_types) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    auto [c, out] = test::embed_case(type, seed);
    compare(c, out, 1e-12);
  }
}

TEST_CASE("vk rmsnorm: odd widths, row offsets, in place") {
  uint32_t seed = 400;
  for (int64_t width : {int64_t(7), int64_t(64), int64_t(1031), int64_t(2052), int64_t(4096)})
    for (int64_t offset : {int64_t(0), int64_t(2)}) {
      CAPTURE(width);
      CAPTURE(offset);
      auto [c, out] = test::rmsnorm_case(width, offset, seed);
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
          auto [c, x] = test::rope_case(pairing, head_dim, partial, factors, seed);
          compare(c, x, 1e-8);
        }
}

TEST_CASE("vk kv write + attention: prefill and decode, GQA and MQA, head dims 64/128/odd") {
  // Decode (split keys), small batches and prefill (>= 16 tokens: the cooperative-matrix kernel where the device
  // has it, head dims up to 128), partial query tiles and starts past 0.
  const test::AttentionShape shapes[] = {{7, 0, 8, 2, 64},   {1, 90, 8, 2, 64},  {33, 40, 4, 1, 128},
                                         {1, 200, 4, 4, 40}, {70, 3, 2, 1, 256}, {1, 511, 6, 3, 96},
                                         {16, 0, 4, 2, 64},  {100, 400, 4, 4, 64}, {2, 300, 4, 2, 18},
                                         {3, 500, 8, 8, 128}};
  uint32_t seed = 600;
  int decode_kernel_cases = 0;
  for (const auto& s : shapes) {
    CAPTURE(s.n_tokens);
    CAPTURE(s.start_pos);
    CAPTURE(s.heads);
    CAPTURE(s.kv_heads);
    CAPTURE(s.head_dim);
    auto [c, out, k_cache] = test::attention_case(s, seed);
    std::string kernels;
    compare(c, out, 1e-9, vk::MatmulKernel::automatic, 2e-6, &kernels);
    compare(c, k_cache, 1e-12);
    // Decode steps with head dims that are multiples of 4 take attention_decode (split keys); others attention_f32.
    if (kernels.find("attention_decode_f32") != std::string::npos) {
      ++decode_kernel_cases;
      CHECK(s.n_tokens <= 4);
      CHECK(s.head_dim % 4 == 0);
    }
  }
  CHECK(decode_kernel_cases >= 3);
}

// Decode attention followed by its output projection: the attention kernel merges its key splits in its last
// workgroup and, with int8 matvecs, writes their input itself (no attention_combine, no quantize_q8 dispatch).
TEST_CASE("vk decode attention merges its splits and feeds the int8 output projection") {
  uint32_t seed = 1300;
  // Positions < 32 (one split of 32 keys at ctx 512): the single-split path that writes the row directly.
  const test::AttentionShape shapes[] = {{1, 90, 8, 2, 64}, {3, 500, 8, 8, 128}, {1, 200, 32, 4, 40},
                                         {1, 10, 8, 2, 64}, {2, 20, 8, 8, 128}};
  for (const auto& s : shapes)
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::F16})
      for (bool q8 : {true, false}) {
        CAPTURE(s.n_tokens);
        CAPTURE(s.head_dim);
        const std::string type_name = model::type_name(type);
        CAPTURE(type_name);
        CAPTURE(q8);
        const char* heads = seed % 3 == 1 ? "4" : seed % 3 == 2 ? "2" : nullptr;  // as in the sliding-window test
        CAPTURE(heads);
        vk::test::ScopedEnv heads_env("GRETA_VK_ATTN_HEADS", heads);
        const std::string kernels = check_decode_step(s, type, seed, q8);
        CHECK_MESSAGE(!has(kernels, "attention_combine"), kernels);
        // More than one where the group allows (small subgroups may take 2 for 4).
        if (heads && (s.heads / s.kv_heads) % std::atoi(heads) == 0) CHECK_MESSAGE(!has(kernels, "(1 head,"), kernels);
        // int8 output where the projection takes int8 input and head dims are whole blocks of 32.
        const bool int8 = q8 && type != GgmlType::F16 && s.head_dim % 32 == 0;
        if (q8 && s.head_dim % 32 == 0) CHECK_MESSAGE(has(kernels, "int8 output"), kernels);
        if (int8) CHECK_MESSAGE(has(kernels, "matvec_q8"), kernels);
        if (int8) CHECK_MESSAGE(!has(kernels, "quantize_q8"), kernels);
        if (q8 && s.head_dim % 32 != 0 && type != GgmlType::F16) CHECK_MESSAGE(has(kernels, "quantize_q8"), kernels);
      }
}

TEST_CASE("vk swiglu, residual add, bias add") {
  for (int64_t rows : {int64_t(1), int64_t(3)})
    for (int64_t width : {int64_t(5), int64_t(1000)}) {
      CAPTURE(rows);
      CAPTURE(width);
      auto [c, ffn, x] = test::elementwise_case(rows, width);
      compare(c, ffn, 1e-12);
      compare(c, x, 1e-12);
    }
}

TEST_CASE("vk matmul followed by a residual add runs fused (x += W h) and matches the CPU") {
  uint32_t seed = 800;
  for (GgmlType type : {GgmlType::F32, GgmlType::Q4_0, GgmlType::Q6_K})
    for (int64_t n : {int64_t(1), int64_t(67)}) {
      const std::string type_name = model::type_name(type);
      CAPTURE(type_name);
      CAPTURE(n);
      auto [c, product] = test::matmul_case(type, n, 256, seed, 130);
      const BufferId x = c.input("residual", n * 130, seed++);
      c.add("residual", AddOp{x, product, n * 130});
      auto vk = vk_backend();
      auto prepared = c.load_and_prepare(*vk);
      CHECK(vk::describe_kernels(*prepared).find("fused") != std::string::npos);
      compare(c, x, 1e-9);
    }
}

// Split-K (GRETA_VK_GEMM_SPLIT): the splits' partials added into y, with and without the fused residual add, K
// steps that do not divide evenly among the splits (96 columns at BK 32: 3 steps), partial tiles of C (101 rows, 5
// and 67 tokens), and f16 rows of 204 columns (a partial last K step, 8-half items straddling two uvec4 of X).
namespace {

// The product of n tokens and `type` weights of rows x cols (plus a residual add that runs fused when `residual`) on
// `kernel`, checked against the CPU. Returns the kernel list.
std::string matmul_kernels(GgmlType type, int64_t n, int64_t cols, int64_t rows, bool residual,
                           vk::MatmulKernel kernel, uint32_t& seed) {
  auto [c, product] = test::matmul_case(type, n, cols, seed, rows);
  BufferId out = product;
  if (residual) {
    out = c.input("residual", n * rows, seed++);
    c.add("residual", AddOp{out, product, n * rows});
  }
  std::string kernels;
  compare(c, out, 1e-9, kernel, kernel == vk::MatmulKernel::coopmat ? 2e-6 : 0.0, &kernels);
  if (residual) CHECK_MESSAGE(has(kernels, "fused"), kernels);
  return kernels;
}

// One coopmat GEMM case for the split-K and K-group tests: `type` weights of 101 rows (partial tiles) and a row length
// with a partial last K step for f16.
std::string coopmat_matmul_kernels(GgmlType type, int64_t n, bool residual, int64_t block32_cols, uint32_t& seed) {
  const int64_t block = model::traits(type).block_elems;
  const int64_t cols = block == 1 ? 204 : block == 256 ? 512 : block32_cols;
  return matmul_kernels(type, n, cols, 101, residual, vk::MatmulKernel::coopmat, seed);
}

}  // namespace

// The tiled kernel splits K over workgroups z when its grid is small (a MoE router's few rows): f32 weights (which
// always take it) and a quantized type, K that leaves the last split a partial step (1000 columns at BK 16), partial
// tiles of C, with and without the fused residual add. Every device.
TEST_CASE("vk tiled matmul splits K when its grid is small and matches the CPU") {
  uint32_t seed = 870;
  for (GgmlType type : {GgmlType::F32, GgmlType::Q4_K})
    for (int64_t n : {int64_t(9), int64_t(37)})
      for (bool residual : {false, true}) {
        const std::string type_name = model::type_name(type);
        CAPTURE(type_name);
        CAPTURE(n);
        CAPTURE(residual);
        const int64_t cols = type == GgmlType::F32 ? 1000 : 1024, rows = type == GgmlType::F32 ? 130 : 37;
        const std::string kernels = matmul_kernels(type, n, cols, rows, residual, vk::MatmulKernel::tiled, seed);
        CHECK_MESSAGE(has(kernels, "matmul_tiled"), kernels);
        CHECK_MESSAGE(has(kernels, "split-K"), kernels);
      }
}

// Split GEMMs side by side (GRETA_VK_GEMM_SPLIT=3 on every GEMM): gate and up of one input run in one stage, their
// partials in regions of their own and their sums queued to a stage after it, before the GLU that reads both; V's sum
// is recorded at the recording's end, after the GLU's stage. On both GEMM kernels (coopmat where the device has it),
// 9 and 16 tokens (not the matvec's steps), partial tiles everywhere (101 and 37 rows).
TEST_CASE("vk split-K GEMMs of one stage keep their partials apart and are summed before their readers") {
  uint32_t seed = 880;
  const bool coopmat = device_has_coopmat();
  vk::test::ScopedEnv env("GRETA_VK_GEMM_SPLIT", "3");
  for (vk::MatmulKernel kernel : {vk::MatmulKernel::tiled, vk::MatmulKernel::coopmat})
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0})
      for (int64_t n : {int64_t(9), int64_t(16)}) {
        if (kernel == vk::MatmulKernel::coopmat && !coopmat) continue;
        const std::string type_name = model::type_name(type);
        CAPTURE(int(kernel));
        CAPTURE(type_name);
        CAPTURE(n);
        const int64_t cols = 768, ffn = 101, kv = 37;
        OpCase c(n, 16);
        const BufferId x = c.input("x", n * cols, seed++);
        const BufferId gate = c.output("gate", n * ffn), up = c.output("up", n * ffn), v = c.output("v", n * kv);
        const WeightId wg = c.weight("w_gate", type, ffn, cols, seed++), wu = c.weight("w_up", type, ffn, cols, seed++),
                       wv = c.weight("w_v", type, kv, cols, seed++);
        c.add("ffn_gate", MatMulOp{x, gate, wg, n, cols, ffn});
        c.add("ffn_up", MatMulOp{x, up, wu, n, cols, ffn});
        c.add("attn_v", MatMulOp{x, v, wv, n, cols, kv});
        c.add("ffn_glu", GluOp{gate, up, gate, n * ffn, GluKind::SiLU});
        std::string kernels;
        compare(c, gate, 1e-9, kernel, 2e-6, &kernels);
        CHECK_MESSAGE(has(kernels, "split-K 3"), kernels);
        CHECK_MESSAGE(has(kernels, kernel == vk::MatmulKernel::coopmat ? "matmul_coopmat" : "matmul_tiled"), kernels);
        compare(c, v, 1e-9, kernel, 2e-6);
      }
}

// Cooperative-matrix devices only.
TEST_CASE("vk coopmat matmul with split-K matches the CPU (with and without the fused residual add)") {
  if (!device_has_coopmat()) {
    MESSAGE("no cooperative-matrix matmul on this device: nothing to test");
    return;
  }
  uint32_t seed = 900;
  for (const char* split : {"2", "3"})
    for (GgmlType type : {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K})
      for (int64_t n : {int64_t(5), int64_t(67)})
        for (bool residual : {false, true}) {
          const std::string type_name = model::type_name(type);
          CAPTURE(split);
          CAPTURE(type_name);
          CAPTURE(n);
          CAPTURE(residual);
          vk::test::ScopedEnv env("GRETA_VK_GEMM_SPLIT", split);
          vk::test::ScopedEnv tile_env("GRETA_VK_COOPMAT_TILE", "128x128x4x2x32x2");  // BK 32: 96 columns, 3 steps
          const std::string kernels = coopmat_matmul_kernels(type, n, residual, 96, seed);
          CHECK_MESSAGE(has(kernels, (std::string("split-K ") + split).c_str()), kernels);
        }
}

// K groups (tile field KG): several groups of subgroups share each K step and sum their accumulators through shared
// memory at the end; alone and under split-K, on partial blocks everywhere (101 rows, 5 / 67 tokens), at load depths 2
// and 3 (staging loads issued 2 and 3 K steps ahead), with the fused residual add at 67 tokens. K steps of 64 and 128
// stage Q6_K's weights in pairs (both halves of a step), of 32 one column at a time.
namespace {

void check_k_groups_tile(const char* tile, uint32_t& seed) {
  for (const char* split : {"1", "2"})
    for (const char* depth : {"2", "3"})
      for (GgmlType type : {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_1})
        for (int64_t n : {int64_t(5), int64_t(67)}) {
          const std::string type_name = model::type_name(type);
          CAPTURE(tile);
          CAPTURE(split);
          CAPTURE(depth);
          CAPTURE(type_name);
          CAPTURE(n);
          vk::test::ScopedEnv tile_env("GRETA_VK_COOPMAT_TILE", tile);
          vk::test::ScopedEnv split_env("GRETA_VK_GEMM_SPLIT", split);
          vk::test::ScopedEnv depth_env("GRETA_VK_GEMM_DEPTH", depth);
          const std::string kernels = coopmat_matmul_kernels(type, n, n == 67, 160, seed);
          CHECK_MESSAGE(has(kernels, tile), kernels);
          if (std::string_view(split) == "2") CHECK_MESSAGE(has(kernels, "split-K 2"), kernels);
          CHECK_MESSAGE(has(kernels, "depth 3") == (std::string_view(depth) == "3"), kernels);
        }
}

}  // namespace

// Tiles with a small one (32 x 64), a large one (4 x 4 fragments per subgroup) and one whose two stages need 72 KiB
// (one shared-memory stage where the device has less: the H100's 48 KiB).
TEST_CASE("vk coopmat matmul with K groups matches the CPU (alone, with split-K, load depths 2 and 3, residual add)") {
  if (!device_has_coopmat()) {
    MESSAGE("no cooperative-matrix matmul on this device: nothing to test");
    return;
  }
  uint32_t seed = 950;
  for (const char* tile : {"128x128x2x2x32x2", "32x64x1x2x32x2", "64x64x2x2x64x4", "128x128x4x2x64x2"})
    check_k_groups_tile(tile, seed);
}

// The batched steps' default tiles of 16, 32 and 33-64 tokens (tuning.h), the last with K steps of 128.
TEST_CASE("vk coopmat matmul: the batched steps' default tiles match the CPU (K groups, split-K, depths, residual)") {
  if (!device_has_coopmat()) {
    MESSAGE("no cooperative-matrix matmul on this device: nothing to test");
    return;
  }
  uint32_t seed = 990;
  for (const vk::MatmulTile& t : {vk::kCoopmatTile16Tokens, vk::kCoopmatTile32Tokens, vk::kCoopmatTile64Tokens})
    check_k_groups_tile(vk::tile_name(vk::GemmKernel::coopmat, t).c_str(), seed);
}

// The int8 cooperative-matrix GEMM of batched steps (matmul_coopmat_q8_<type>, Q4_0, Q4_K and Q6_K on int8 activations;
// H200 and other devices with 16x16x32 s8 cooperative matrices): token counts that leave partial tiles of 16 (5, 33)
// and whole ones (16, 32, 64), rows that leave partial tiles (101, 165), a row length of 256 and one of 1280 (10 K
// steps of 128: uneven splits; Q6_K's 210-byte super-blocks at both word alignments), with and without the fused
// residual add (at 16, 32 and 33 tokens: whole blocks, which add y's block loaded as a fragment, and edge blocks), on
// the automatic tile and split (17-32 tokens: 64 rows on four subgroups for Q4_0 and Q4_K; past 32: the same, 3 splits
// for Q4_0 and 2 for Q4_K; Q6_K past 32 tokens takes the f16 GEMM), forced splits (1, 3) and forced tiles (two
// subgroups of two fragments; one subgroup; 64 tokens on 4 fragments, 32 or 64 rows, the latter Q4_K's tile that fills
// 48 KiB with the edge tiles in the scales' space; K steps of 256), which run Q6_K at any count. Every type's block
// sums are biased integers scaled in one fma (q8_rows.glsl's q8_biased_scaled).
TEST_CASE("vk int8 cooperative-matrix GEMM (Q4_0, Q4_K, Q6_K) matches the CPU: partial tiles, splits, residual") {
  uint32_t seed = 1700;
  if (!device_has_coopmat()) {
    MESSAGE("no cooperative-matrix matmul on this device: nothing to test");
    return;
  }
  {
    auto vk = vk_backend(vk::MatmulKernel::coopmat);
    uint32_t probe_seed = seed;
    auto [c, out] = test::matmul_case(GgmlType::Q4_K, 16, 256, probe_seed);
    auto prepared = c.load_and_prepare(*vk);
    if (!has(vk::describe_kernels(*prepared), "matmul_coopmat_q8")) {
      MESSAGE("no int8 cooperative-matrix GEMM on this device: nothing to test");
      return;
    }
  }
  struct Variant {
    const char* tile;   // GRETA_VK_GEMM_Q8 (nullptr: the automatic tile)
    const char* split;  // GRETA_VK_GEMM_SPLIT (nullptr: the automatic split)
  };
  const Variant variants[] = {{nullptr, nullptr}, {nullptr, "1"}, {nullptr, "3"}, {"1x2x2x128", nullptr},
                              {"1x2x1x128", "2"}, {"4x1x2x128", nullptr}, {"4x2x2x128", nullptr},
                              {"1x1x2x256", "3"}, {"4x1x4x256", nullptr}};  // 4x1x4x256: one stage, Q6_K's 48 KiB
  for (const Variant& v : variants)
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K})
      for (int64_t n : {int64_t(5), int64_t(16), int64_t(32), int64_t(33), int64_t(64)})
        for (int64_t cols : {int64_t(256), int64_t(1280)}) {
          if (v.tile && (n == 32 || (cols == 256 && n != 33))) continue;  // forced tiles: long rows, one short case
          // Q6_K's 64 x 64 tile needs 51 KiB (X staged with the zeros between block halves).
          if (v.tile && type == GgmlType::Q6_K && std::string_view(v.tile) == "4x2x2x128") continue;
          const bool residual = n == 33 || n == 32 || n == 16;  // 16, 32: whole blocks on the automatic tile
          const int64_t rows = n == 16 ? 165 : 101;
          const std::string type_name = model::type_name(type);
          CAPTURE(v.tile ? v.tile : "auto");
          CAPTURE(v.split ? v.split : "auto");
          CAPTURE(type_name);
          CAPTURE(n);
          CAPTURE(cols);
          const vk::test::ScopedEnv tile_env("GRETA_VK_GEMM_Q8", v.tile);
          const vk::test::ScopedEnv split_env("GRETA_VK_GEMM_SPLIT", v.split);
          const std::string kernels = matmul_kernels(type, n, cols, rows, residual, vk::MatmulKernel::coopmat, seed);
          const bool int8_gemm = v.tile || type != GgmlType::Q6_K || n <= 32;
          CHECK_MESSAGE(has(kernels, "matmul_coopmat_q8") == int8_gemm, kernels);
          // 64-row tiles at 32 tokens (Q6_K's only below 16384 rows: these have 101).
          if (!v.tile && n == 32) CHECK_MESSAGE(has(kernels, "32x64x128"), kernels);
          if (v.split && std::string_view(v.split) != "1" && cols == 1280)
            CHECK_MESSAGE(has(kernels, cat("split-K ", v.split).c_str()), kernels);
        }
}

// The decode fusions (src/vk/backend/fusion.h): each fused kernel against the CPU running the unfused ops, and the
// kernel list proving the fused kernel ran (and that prefill-sized steps stay unfused).

// --- ops of the newer architectures (issue 23): embedding scale, rope scaling, sliding windows and sinks, GLU
// kinds, mixture of experts --------------------------------------------------------------------------------------

TEST_CASE("vk embedding with a scale (gemma3's sqrt(dim))") {
  uint32_t seed = 1400;
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K}) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    auto [c, out] = test::embed_case(type, seed, std::sqrt(96.f));
    compare(c, out, 1e-12);
  }
}

TEST_CASE("vk rope with attn_factor and YaRN scaling, alone and fused with the kv writes") {
  uint32_t seed = 1410;
  for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
    for (int64_t head_dim : {int64_t(64), int64_t(40)})
      for (bool partial : {false, true})
        for (bool yarn : {false, true}) {
          CAPTURE(int(pairing));
          CAPTURE(head_dim);
          CAPTURE(partial);
          CAPTURE(yarn);
          auto [c, x] = test::rope_scaled_case(pairing, head_dim, partial, yarn, seed);
          compare(c, x, 1e-8);
        }
  for (int64_t n : {int64_t(1), int64_t(3)}) {
    CAPTURE(n);
    auto rc = test::rope_kv_case(model::RopePairing::NeoxHalves, n, 64, false, false, true, seed,
                                 engine::ElemType::F32, true);
    const std::string kernels = compare_fused(rc.c, rc.k_cache, 1e-8);
    CHECK_MESSAGE(has(kernels, "rope_q  rope_kv_f32"), kernels);
    compare(rc.c, rc.q, 1e-8);
  }
}

TEST_CASE("vk attention with sliding windows and sinks: prefill, decode splits, several sequences, cache types") {
  // window, sinks: prefill (the scalar kernel here; coopmat on devices that have it), decode over many splits whose
  // first ones hold no key of the window (the sink lives in split 0), one split (positions < 32), odd head dims
  // (attention_f32's split mode + attention_combine), several sequences, f16 and q8_0 caches.
  using engine::ElemType;
  test::AttentionShape shapes[] = {
      {70, 3, 4, 2, 64},   {33, 40, 4, 1, 128}, {1, 300, 8, 2, 64}, {3, 500, 8, 8, 128},
      {1, 10, 8, 2, 64},   {2, 300, 4, 2, 18},  {1, 200, 4, 4, 40}, {80, 100, 4, 2, 64, 3},
      {16, 0, 4, 2, 64},   {1, 450, 8, 2, 64, 1, ElemType::F16},    {20, 400, 4, 2, 64, 1, ElemType::Q8_0},
  };
  uint32_t seed = 1420;
  int cases = 0, decode_cases = 0, combine_cases = 0;
  for (test::AttentionShape s : shapes)
    for (int64_t window : {int64_t(0), int64_t(1), int64_t(17), int64_t(50)})
      for (bool sinks : {false, true}) {
        if (window == 0 && !sinks) continue;  // the plain attention tests cover it
        if (window == 1 && sinks != (cases % 2 == 0)) continue;
        s.window = window;
        s.sinks = sinks;
        CAPTURE(s.n_tokens);
        CAPTURE(s.start_pos);
        CAPTURE(s.head_dim);
        CAPTURE(s.n_seqs);
        CAPTURE(int(s.kv_type));
        CAPTURE(window);
        CAPTURE(sinks);
        // attention_decode's query heads per workgroup (sharing their KV head's loads), forced in turn: the steps
        // here are too small for the backend to choose more than one.
        const char* heads = cases % 3 == 1 ? "4" : cases % 3 == 2 ? "2" : nullptr;
        CAPTURE(heads);
        vk::test::ScopedEnv heads_env("GRETA_VK_ATTN_HEADS", heads);
        auto [c, out, k_cache] = test::attention_case(s, seed);
        std::string kernels;
        compare(c, out, 1e-9, vk::MatmulKernel::automatic, 2e-6, &kernels);
        const int64_t group = s.heads / s.kv_heads;
        if (heads && has(kernels, "attention_decode_f32") && group % std::atoi(heads) == 0)
          CHECK_MESSAGE(!has(kernels, "(1 head,"), kernels);
        if (window > 0) CHECK_MESSAGE(has(kernels, "window"), kernels);
        if (sinks) CHECK_MESSAGE(has(kernels, "sinks"), kernels);
        ++cases;
        decode_cases += has(kernels, "attention_decode_f32");
        combine_cases += has(kernels, "attention_combine_f32");
      }
  CHECK(cases > 30);
  CHECK(decode_cases > 10);
  CHECK(combine_cases > 2);
}

TEST_CASE("vk glu: every kind") {
  uint32_t seed = 1440;
  for (auto kind : {GluKind::SiLU, GluKind::GeluTanh, GluKind::SwiGluOai})
    for (int64_t rows : {int64_t(1), int64_t(3)})
      for (int64_t width : {int64_t(5), int64_t(1000)}) {
        const std::string kind_name = glu_kind_name(kind);
        CAPTURE(kind_name);
        CAPTURE(rows);
        CAPTURE(width);
        auto [c, out] = test::glu_case(kind, rows, width, seed);
        std::string kernels;
        compare(c, out, 1e-11, vk::MatmulKernel::automatic, 2e-6, &kernels);
        CHECK_MESSAGE(has(kernels, kind_name.c_str()), kernels);
      }
}

TEST_CASE("vk mixture of experts: routing, expert matmuls (matvec and grouped GEMM), combine") {
  // Token counts 1 and 5 take the expert matvec (each slot reads its expert's rows: matvec_block.comp's MOE variants
  // for quantized types, moe_matvec otherwise), 67 and 70 the grouped GEMM (with
  // `skew`, one expert gets a slot of every token: more than one 64-slot tile). Odd in_features (not multiples of 4)
  // always take the matvec kernel.
  using test::MoeShape;
  const MoeShape shapes[] = {
      {1, 6, 1, 96, 64},
      {5, 6, 2, 96, 64, GgmlType::Q8_0, MoeGating::SoftmaxTopK, false},
      {67, 6, 4, 96, 64, GgmlType::Q8_0, MoeGating::SoftmaxTopK, true, false, true},
      {70, 4, 3, 96, 64, GgmlType::Q4_0, MoeGating::TopKSoftmax, false, true, false, GluKind::SwiGluOai},
      {1, 5, 2, 256, 256, GgmlType::Q4_K},
      {70, 5, 2, 256, 256, GgmlType::Q4_K, MoeGating::SoftmaxTopK, true, false, true},
      {3, 7, 4, 256, 256, GgmlType::Q6_K, MoeGating::TopKSoftmax, true, true},
      {2, 4, 3, 30, 22, GgmlType::F16, MoeGating::SoftmaxTopK, true, true, false, GluKind::GeluTanh},
      {20, 4, 3, 30, 22, GgmlType::F32},
      {40, 8, 4, 36, 20, GgmlType::F32, MoeGating::TopKSoftmax, true, true, true, GluKind::SwiGluOai},
      {9, 3, 3, 64, 32, GgmlType::F16, MoeGating::SoftmaxTopK, false, true, true, GluKind::GeluTanh},
      {2, 8, 3, 64, 64, GgmlType::MXFP4, MoeGating::TopKSoftmax, true, true, false, GluKind::SwiGluOai},
      {1, 130, 8, 64, 32, GgmlType::Q8_0},  // more experts than the router's workgroup has invocations
      // and grouped: moe_group.comp's scans split over a few invocations per expert (segments of odd length)
      {37, 130, 8, 64, 32, GgmlType::Q8_0, MoeGating::SoftmaxTopK, false, false, true},
  };
  uint32_t seed = 1460;
  bool matvec = false, gemm = false;
  for (const MoeShape& s : shapes) {
    const std::string type_name = model::type_name(s.type);
    CAPTURE(type_name);
    CAPTURE(s.n_tokens);
    CAPTURE(s.n_experts);
    CAPTURE(s.k);
    CAPTURE(s.dim);
    CAPTURE(int(s.gating));
    CAPTURE(s.bias);
    auto mc = test::moe_case(s, seed);
    std::string kernels;
    compare(mc.c, mc.experts, 0.0, vk::MatmulKernel::automatic, 0.0, &kernels);  // the same ids
    compare(mc.c, mc.weights, 1e-11);
    {
      // The GLU's in-place output over the gate: with the decode fusions the down projection makes it itself and the
      // GLU does not run, so the gate buffer is checked with them off.
      greta::vk::test::ScopedEnv no_fusions("GRETA_VK_FUSE", "none");
      compare(mc.c, mc.gate, 1e-9);
    }
    compare(mc.c, mc.down, 1e-9);
    compare(mc.c, mc.out, 1e-9);
    matvec = matvec || has(kernels, "moe_matvec");
    gemm = gemm || has(kernels, "moe_gemm") || has(kernels, "moe_coopmat");
    if (s.n_tokens > 8 && s.dim % 4 == 0)  // moe_coopmat on devices with cooperative matrices (not for F32 weights)
      CHECK_MESSAGE((has(kernels, "gate  moe_gemm") || has(kernels, "gate  moe_coopmat")), kernels);
    if (s.n_tokens > 8 && s.dim % 4 == 0) {  // one grouping for the matmuls of the same expert ids
      CHECK_MESSAGE(has(kernels, "grouped by expert: moe_group"), kernels);
      CHECK_MESSAGE(has(kernels, "grouped by expert: the groups of an earlier matmul"), kernels);
    }
    if (s.n_tokens <= 8) CHECK_MESSAGE(has(kernels, "gate  moe_matvec"), kernels);
    if (s.n_tokens <= 8 && model::traits(s.type).block_elems > 1) {  // a quantized type
      // The block-wise kernels (matvec_block.comp's MOE variants): int8 activations where the device has integer
      // dot products, and f32 ones.
      CHECK_MESSAGE((has(kernels, "moe_matvec_q8_") || has(kernels, "moe_matvec_block_")), kernels);
      std::string f32_kernels;
      compare(mc.c, mc.out, 1e-9, vk::MatmulKernel::automatic, 0.0, &f32_kernels, /*q8=*/false);
      CHECK_MESSAGE(has(f32_kernels, "gate  moe_matvec_block_"), f32_kernels);
    }
  }
  CHECK(matvec);
  CHECK(gemm);
}
