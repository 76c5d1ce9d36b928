// The Vulkan backend's decode fusions (src/vk/backend/fusion.h) against the CPU reference: each fused case is checked
// as vk_ops_test.cpp checks single ops (same tolerances, vk_ops_compare.h), and its kernel list proves the fused kernel
// ran (and that prefill-sized steps stay unfused).
#include <doctest/doctest.h>

#include <cctype>
#include <string>

#include "engine/op_case.h"
#include "engine/op_cases.h"
#include "engine/plan.h"
#include "model/quants.h"
#include "test_util.h"
#include "vk_ops_compare.h"
#include "vk_test_util.h"
#include "vk/backend/vk_backend.h"

using namespace greta;
using namespace greta::engine;
using namespace greta::vk::test;
using model::GgmlType;

TEST_CASE("vk decode fusion: rmsnorm inside the matvecs that read it (every weight type, row offsets, kept norm)") {
  uint32_t seed = 900;
  for (GgmlType type : test::k_all_weight_types)
    for (int64_t cols : test::matmul_row_lengths(type))
      for (int64_t n : {int64_t(1), int64_t(3)})
        for (int64_t offset : {int64_t(0), int64_t(2)})
          for (bool q8 : {true, false}) {  // int8 activations (quantize_q8 normalizes) or f32 (the matvec does)
            if (!q8 && model::traits(type).block_elems == 1) continue;  // f32/f16/bf16: no int8 path
            const std::string type_name = model::type_name(type);
            CAPTURE(type_name);
            CAPTURE(cols);
            CAPTURE(n);
            CAPTURE(offset);
            CAPTURE(q8);
            auto nc = test::norm_matmul_case(type, n, cols, offset, false, seed);
            const std::string kernels = compare_fused(nc.c, nc.q, 1e-9, q8);
            CHECK_MESSAGE(has(kernels, "attn_q  matvec"), kernels);
            CHECK_MESSAGE(has(kernels, "attn_k  matvec"), kernels);
            CHECK_MESSAGE(has(kernels, "attn_norm  (fused into attn_q)"), kernels);
            CHECK_MESSAGE(!has(kernels, "rmsnorm_f32"), kernels);
            compare(nc.c, nc.k, 1e-9, vk::MatmulKernel::automatic, 2e-6, nullptr, q8);
          }
  // Another reader of the normed rows keeps the rmsnorm dispatch (running beside the fused matvecs).
  for (GgmlType type : {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q6_K}) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    auto nc = test::norm_matmul_case(type, 1, 256, 0, true, seed);
    const std::string kernels = compare_fused(nc.c, nc.q, 1e-9);
    CHECK_MESSAGE(has(kernels, "attn_norm  rmsnorm_f32"), kernels);
    CHECK_MESSAGE(has(kernels, "fused rmsnorm input"), kernels);
    compare(nc.c, nc.extra, 1e-9);
    compare(nc.c, nc.k, 1e-9);
  }
  // Prefill-sized steps keep the rmsnorm dispatch and the plain kernels.
  auto nc = test::norm_matmul_case(GgmlType::Q8_0, 5, 96, 0, false, seed);
  const std::string kernels = compare_fused(nc.c, nc.q, 1e-9);
  CHECK_MESSAGE(has(kernels, "attn_norm  rmsnorm_f32"), kernels);
  CHECK_MESSAGE(!has(kernels, "fused rmsnorm input"), kernels);
}

TEST_CASE("vk decode fusion: swiglu inside the down matvec (with its residual add), kept or not") {
  greta::vk::test::ScopedEnv fuse_all("GRETA_VK_FUSE", "all");  // off by default with f32 activations (VkBackendOptions)
  uint32_t seed = 1000;
  for (GgmlType type : test::k_all_weight_types)
    for (int64_t ffn : test::matmul_row_lengths(type))
      for (int64_t n : {int64_t(1), int64_t(2)})
        for (bool q8 : {true, false}) {  // int8 activations (quantize_q8 applies silu) or f32 (the matvec does)
          if (!q8 && model::traits(type).block_elems == 1) continue;  // f32/f16/bf16: no int8 path
          const std::string type_name = model::type_name(type);
          CAPTURE(type_name);
          CAPTURE(ffn);
          CAPTURE(n);
          CAPTURE(q8);
          auto sc = test::swiglu_matmul_case(type, n, ffn, false, false, seed);
          const std::string kernels = compare_fused(sc.c, sc.x, 1e-9, q8);
          CHECK_MESSAGE(has(kernels, "fused swiglu input"), kernels);
          CHECK_MESSAGE(has(kernels, "fused residual add"), kernels);
          CHECK_MESSAGE(has(kernels, "ffn_swiglu  (fused into ffn_down)"), kernels);
        }
  // gpt-oss's clamped SwiGLU (IN_SWIGLU_OAI): the plain matvec (F16), the block-wise and int8 kernels.
  for (GgmlType type : {GgmlType::F16, GgmlType::Q4_K, GgmlType::MXFP4, GgmlType::Q8_0})
    for (int64_t n : {int64_t(1), int64_t(2)})
      for (bool q8 : {true, false}) {
        if (!q8 && model::traits(type).block_elems == 1) continue;
        const std::string type_name = model::type_name(type);
        CAPTURE(type_name);
        CAPTURE(n);
        CAPTURE(q8);
        auto sc = test::swiglu_matmul_case(type, n, 256, false, false, seed, GluKind::SwiGluOai);
        const std::string kernels = compare_fused(sc.c, sc.x, 1e-9, q8);
        CHECK_MESSAGE(has(kernels, "fused clamped swiglu input"), kernels);
        CHECK_MESSAGE(has(kernels, "ffn_swiglu  (fused into ffn_down)"), kernels);
      }
  for (GgmlType type : {GgmlType::BF16, GgmlType::Q5_1, GgmlType::Q4_K}) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    // A separate output read by another op: the swiglu dispatch stays, beside the fused matvec.
    auto kept = test::swiglu_matmul_case(type, 1, 512, true, true, seed);
    std::string kernels = compare_fused(kept.c, kept.x, 1e-9);
    CHECK_MESSAGE(has(kernels, "fused swiglu input"), kernels);
    CHECK_MESSAGE(has(kernels, "ffn_swiglu  glu_f32"), kernels);
    compare(kept.c, kept.extra, 1e-12);
    // In place over the gate and read by another op: the swiglu must run first, so nothing is fused into the matvec.
    auto in_place = test::swiglu_matmul_case(type, 1, 512, false, true, seed);
    kernels = compare_fused(in_place.c, in_place.x, 1e-9);
    CHECK_MESSAGE(!has(kernels, "fused swiglu input"), kernels);
    compare(in_place.c, in_place.extra, 1e-12);
  }
}

TEST_CASE("vk decode fusion: one token's gate and up matvecs making the down projection's int8 input (GLU_OUT)") {
  uint32_t seed = 1100;
  struct Shape {
    GgmlType type, down_type;
    int64_t dim, ffn;
  };
  // Legacy and K-quant blocks, a Q4_K_M-style Q6_K down projection, odd block counts (288 rows: 9 blocks of 32).
  for (const Shape& s : {Shape{GgmlType::Q4_0, GgmlType::Q4_0, 96, 288}, Shape{GgmlType::Q4_K, GgmlType::Q6_K, 256, 512},
                         Shape{GgmlType::Q8_0, GgmlType::Q5_K, 64, 256}})
    for (int64_t n : {int64_t(1), int64_t(2)})  // one-token steps only (glu_pair_usable); two keep the quantizer
      for (GluKind kind : {GluKind::SiLU, GluKind::SwiGluOai}) {
        if (kind == GluKind::SwiGluOai && n != 1) continue;
        const std::string type_name = model::type_name(s.type), down_name = model::type_name(s.down_type);
        CAPTURE(type_name);
        CAPTURE(down_name);
        CAPTURE(n);
        const bool oai = kind == GluKind::SwiGluOai;
        CAPTURE(oai);
        auto fc = test::ffn_case(s.type, s.down_type, n, s.dim, s.ffn, seed, kind);
        // Two int8 quantizations in a row (the normed input, then the GLU): twice one int8 matvec's limit. The
        // clamped GLU with its clamps binding (limit 0.7) gives larger errors, with or without the pair: over 40
        // seeds of the Q4_K / Q6_K shape the quantizer's path reached an NMSE of 7.8e-4 (SiLU 1.2e-4).
        const double limit = (kind == GluKind::SwiGluOai ? 5 : 2) * k_q8_limit;
        std::string kernels, apart;
        const double e = compare(fc.c, fc.x, limit, vk::MatmulKernel::automatic, 2e-6, &kernels);
        CHECK_MESSAGE(has(kernels, "makes the down projection's int8 input") == (n == 1), kernels);
        CHECK_MESSAGE(has(kernels, "(int8, made by the gate and up projections)") == (n == 1), kernels);
        CHECK_MESSAGE(!has(kernels, "ffn_swiglu  glu_f32"), kernels);
        compare(fc.c, fc.up, 1e-9);
        // Turned off, the down projection's quantizer makes the input again (and the results agree as well).
        greta::vk::test::ScopedEnv no_pair("GRETA_VK_FUSE", "residual,norm,rope_kv,swiglu,bias,route");
        const double e_apart = compare(fc.c, fc.x, limit, vk::MatmulKernel::automatic, 2e-6, &apart);
        CHECK_MESSAGE(!has(apart, "makes the down projection's int8 input"), apart);
        // The same GLU and the same int8 rows either way (quantize_q8.comp's): the same error, up to rounding.
        CHECK(e == doctest::Approx(e_apart).epsilon(1e-3).scale(0));
      }
}

TEST_CASE("vk decode fusion: a residual-adding matvec making the next rmsnorm's int8 input (NORM_OUT)") {
  uint32_t seed = 1150;
  // The projection's type and the next matvecs', its input and output widths: legacy and K-quant blocks, odd block
  // counts (96 rows: 3 blocks of 32); below, the workgroups of 4, 2 and 1 rows.
  const struct {
    GgmlType type, next_type;
    int64_t in, dim;
  } shapes[] = {{GgmlType::Q4_0, GgmlType::Q4_0, 96, 96}, {GgmlType::Q4_K, GgmlType::Q6_K, 256, 256},
                {GgmlType::Q6_K, GgmlType::Q8_0, 256, 64}};
  for (const auto& s : shapes)
    for (const char* shape : {(const char*)nullptr, "64x4", "32x1"})
      for (int64_t n : {int64_t(1), int64_t(2), int64_t(4), int64_t(5)}) {
        if (shape && n != 1) continue;
        const std::string type_name = model::type_name(s.type), next_name = model::type_name(s.next_type);
        CAPTURE(type_name);
        CAPTURE(next_name);
        const std::string shape_name = shape ? shape : "auto";
        CAPTURE(shape_name);
        CAPTURE(n);
        const vk::test::ScopedEnv matvec_env("GRETA_VK_MATVEC", shape);
        auto rc = test::residual_norm_case(s.type, s.next_type, n, s.in, s.dim, 37, seed);
        std::string kernels, apart;
        compare(rc.c, rc.x, k_q8_limit, vk::MatmulKernel::automatic, 2e-6, &kernels);
        // One-token steps only (norm_out_usable); 2-4 keep the quantizer, 5 the rmsnorm (or the GEMMs).
        CHECK_MESSAGE(has(kernels, "makes the next rmsnorm's int8 input") == (n == 1), kernels);
        // Two int8 quantizations in a row (the projection's input, then the normed stream): twice the limit.
        const double e = compare(rc.c, rc.q, 2 * k_q8_limit, vk::MatmulKernel::automatic, 2e-6, &kernels);
        CHECK_MESSAGE(has(kernels, "(int8, made by the projection before)") == has(kernels, "next rmsnorm's"), kernels);
        compare(rc.c, rc.k, 2 * k_q8_limit);
        // Turned off, the quantizer makes the normed rows again: the same codes up to rounding, so about the same error.
        greta::vk::test::ScopedEnv off("GRETA_VK_FUSE", "residual,norm,rope_kv,swiglu,bias,route,glu_out");
        const double e_apart = compare(rc.c, rc.q, 2 * k_q8_limit, vk::MatmulKernel::automatic, 2e-6, &apart);
        CHECK_MESSAGE(!has(apart, "next rmsnorm's"), apart);
        CHECK(e == doctest::Approx(e_apart).epsilon(0.02).scale(0));
      }
}

TEST_CASE("vk decode fusion: the Q, K and V matvecs doing rope_kv's rotation and cache writes (ROPE_OUT)") {
  uint32_t seed = 1180;
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q4_0, GgmlType::Q8_0})
    for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
      for (bool partial : {false, true})
        for (engine::ElemType kv : {engine::ElemType::F16, engine::ElemType::F32})
          for (const char* shape : {(const char*)nullptr, "64x4", "32x1"})  // 2, 4 and 1 rows per workgroup
            for (int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(4)}) {
              const bool adjacent = pairing == model::RopePairing::Adjacent;
              // Every shape and cache type once for the plain rotation; NeoX halves (kept apart), partial rotation
              // and Q8_0 (a third weight type) on the automatic workgroup only; 4 tokens (TOKENS 4) on the plain
              // rotation into an f16 cache.
              if ((shape || !adjacent || partial) && (n == 3 || kv == engine::ElemType::F32)) continue;
              if (n == 4 && (!adjacent || partial || kv == engine::ElemType::F32 || type == GgmlType::Q8_0)) continue;
              if (shape && (!adjacent || partial || type == GgmlType::Q8_0)) continue;
              const std::string type_name = model::type_name(type), shape_name = shape ? shape : "auto";
              CAPTURE(type_name);
              CAPTURE(adjacent);
              CAPTURE(partial);
              CAPTURE(int(kv));
              CAPTURE(shape_name);
              CAPTURE(n);
              const vk::test::ScopedEnv matvec_env("GRETA_VK_MATVEC", shape);
              auto qc = test::qkv_rope_case(type, pairing, n, 256, 64, partial, kv, seed);
              std::string kernels, apart;
              const double e = compare(qc.c, qc.q, k_q8_limit, vk::MatmulKernel::automatic, 2e-6, &kernels);
              // Steps of 1-4 tokens (rope_out_usable), whole pairs per row group, adjacent pairs.
              const bool fused = adjacent && n <= 4 && !(shape && std::string_view(shape) == "32x1");
              CHECK_MESSAGE(has(kernels, "rotates q (rope_kv's part)") == fused, kernels);
              CHECK_MESSAGE(has(kernels, "rotates k and appends it to the cache") == fused, kernels);
              CHECK_MESSAGE(has(kernels, "appends v to the cache") == fused, kernels);
              CHECK_MESSAGE(has(kernels, "(done by the Q, K and V projections)") == fused, kernels);
              CHECK_MESSAGE(has(kernels, "rope_kv_f32") == !fused, kernels);
              compare(qc.c, qc.k_cache, k_q8_limit);
              compare(qc.c, qc.v_cache, k_q8_limit);
              // Turned off, rope_kv rotates the same int8 products: the same error up to rounding.
              greta::vk::test::ScopedEnv off("GRETA_VK_FUSE", "residual,norm,rope_kv,swiglu,bias,route,glu_out,norm_out");
              const double e_apart = compare(qc.c, qc.q, k_q8_limit, vk::MatmulKernel::automatic, 2e-6, &apart);
              CHECK_MESSAGE(!has(apart, "rope_kv's part"), apart);
              CHECK(e == doctest::Approx(e_apart).epsilon(1e-3).scale(0));
            }
}

TEST_CASE("vk decode fusion: the bias add inside the matvec, the MoE combine adding into the residual stream") {
  greta::vk::test::ScopedEnv fuse_all("GRETA_VK_FUSE", "all");
  uint32_t seed = 1200;
  // matmul + bias (gpt-oss's and qwen2's projections): the BIAS stage of matvec_block (quantized types) and matvec
  // (F16, F32: gpt-oss's router); with `residual`, the residual add of the biased product too (gpt-oss's attention
  // output).
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::MXFP4, GgmlType::Q8_0, GgmlType::IQ4_NL, GgmlType::F16, GgmlType::F32})
    for (int64_t n : {int64_t(1), int64_t(3)})
      for (bool q8 : {true, false})
        for (bool residual : {false, true}) {
          const std::string type_name = model::type_name(type);
          CAPTURE(type_name);
          CAPTURE(n);
          CAPTURE(q8);
          CAPTURE(residual);
          const int64_t in = 256, out = 37;
          OpCase c(n, 8);
          const BufferId x = c.input("x", n * in, seed++);
          const BufferId y = c.output("q", n * out);
          const BufferId stream = c.input("stream", n * out, seed++);
          const engine::WeightId w = c.weight("wq", type, out, in, seed++);
          const engine::WeightId b = c.weight("bq", GgmlType::F32, 1, out, seed++);
          c.add("q", engine::MatMulOp{x, y, w, n, in, out});
          c.add("q.bias", engine::AddBiasOp{y, b, n, out});
          if (residual) c.add("residual", engine::AddOp{stream, y, n * out});
          const std::string kernels = compare_fused(c, residual ? stream : y, 1e-9, q8);
          CHECK_MESSAGE(has(kernels, "q.bias  (fused into q)"), kernels);
          CHECK_MESSAGE(has(kernels, "fused bias"), kernels);
          if (residual) CHECK_MESSAGE(has(kernels, "residual  (fused into q)"), kernels);
        }
  // Projections first, then their bias adds (gpt-oss's q, k, v order): each bias still goes into its matvec.
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::F32}) {
    const std::string type_name = model::type_name(type);
    CAPTURE(type_name);
    const int64_t n = 1, in = 64, out_q = 48, out_k = 16;
    OpCase c(n, 8);
    const BufferId x = c.input("x", n * in, seed++);
    const BufferId q = c.output("q", n * out_q), k = c.output("k", n * out_k);
    const engine::WeightId wq = c.weight("wq", type, out_q, in, seed++), wk = c.weight("wk", type, out_k, in, seed++);
    const engine::WeightId bq = c.weight("bq", GgmlType::F32, 1, out_q, seed++);
    const engine::WeightId bk = c.weight("bk", GgmlType::F32, 1, out_k, seed++);
    c.add("q", engine::MatMulOp{x, q, wq, n, in, out_q});
    c.add("k", engine::MatMulOp{x, k, wk, n, in, out_k});
    c.add("q.bias", engine::AddBiasOp{q, bq, n, out_q});
    c.add("k.bias", engine::AddBiasOp{k, bk, n, out_k});
    const std::string kernels = compare_fused(c, q, 1e-9);
    compare(c, k, 1e-9);
    CHECK_MESSAGE(has(kernels, "q.bias  (fused into q)"), kernels);
    CHECK_MESSAGE(has(kernels, "k.bias  (fused into k)"), kernels);
  }
  // A MoE layer's ffn_norm inside the gate and up projections, its GLU inside the down projection (decode, the
  // block-wise expert kernels; both dispatches dropped): qwen3moe's SiLU with Q4_K experts, gpt-oss's clamped SwiGLU
  // with MXFP4 ones.
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::MXFP4})
    for (int64_t n : {int64_t(1), int64_t(2)})
      for (bool q8 : {true, false}) {
        const std::string type_name = model::type_name(type);
        const GluKind glu = type == GgmlType::MXFP4 ? GluKind::SwiGluOai : GluKind::SiLU;
        CAPTURE(type_name);
        CAPTURE(n);
        CAPTURE(q8);
        const int64_t k = 2, n_experts = 5, dim = 256, ffn = 256;
        OpCase c(n, 8);
        const BufferId x = c.input("x", n * dim, seed++);
        const BufferId xb = c.output("xb", n * dim);
        const BufferId logits = c.output("router_logits", n * n_experts);
        const BufferId experts = c.plan.add_buffer("experts", engine::ElemType::I32, engine::BufferRole::Scratch, n * k);
        const BufferId weights = c.output("expert_weights", n * k);
        const BufferId gate = c.output("gate", n * k * ffn), up = c.output("up", n * k * ffn);
        const engine::WeightId w_router = c.weight("router", GgmlType::F32, n_experts, dim, seed++);
        const BufferId down = c.output("down", n * k * dim);
        const engine::WeightId norm_w = c.weight("ffn_norm", GgmlType::F32, 1, dim, seed++, 0.5f, 1.5f);
        const engine::WeightId w_gate = c.weight("gate_exps", type, n_experts * ffn, dim, seed++);
        const engine::WeightId w_up = c.weight("up_exps", type, n_experts * ffn, dim, seed++);
        const engine::WeightId w_down = c.weight("down_exps", type, n_experts * dim, ffn, seed++);
        c.add("ffn_norm", engine::RmsNormOp{x, xb, norm_w, n, dim, 0, 1e-6f});
        c.add("router", engine::MatMulOp{xb, logits, w_router, n, dim, n_experts});
        c.add("route", engine::MoeRouteOp{logits, experts, weights, n, n_experts, k, MoeGating::SoftmaxTopK, true});
        c.add("gate", engine::MoeMatMulOp{xb, experts, gate, w_gate, engine::kNoWeight, n, k, dim, ffn, n_experts, false});
        c.add("up", engine::MoeMatMulOp{xb, experts, up, w_up, engine::kNoWeight, n, k, dim, ffn, n_experts, false});
        // The clamp binds at 0.7 (checked to 1e-9 on the f32 path); with int8 activations, gpt-oss's own 7: at 0.7
        // this chain's two int8 quantizations reached 4.4e-4 of NMSE, past the int8 limit.
        c.add("glu", engine::GluOp{gate, up, gate, n * k * ffn, glu, 1.702f, q8 ? 7.f : 0.7f});
        c.add("down", engine::MoeMatMulOp{gate, experts, down, w_down, engine::kNoWeight, n, k, ffn, dim, n_experts, true});
        const std::string kernels = compare_fused(c, down, 1e-9, q8);
        CHECK_MESSAGE(has(kernels, "ffn_norm  (fused into router)"), kernels);
        // With int8 activations the experts' quantized input is made beside the f32 router, not after the route.
        if (q8) CHECK_MESSAGE(has(kernels, "router  quantize_q8 + matvec_route_f32"), kernels);
        CHECK_MESSAGE(has(kernels, "route  (fused into router)"), kernels);
        CHECK_MESSAGE(has(kernels, "glu  (fused into down)"), kernels);
        CHECK_MESSAGE(has(kernels, q8 ? "fused rmsnorm input (quantize_q8)" : "fused rmsnorm input"), kernels);
        const std::string glu_input = glu == GluKind::SiLU ? "fused swiglu input" : "fused clamped swiglu input";
        // With int8 activations the gate and up projections make the down projection's int8 input themselves.
        CHECK_MESSAGE(has(kernels, (q8 ? glu_input + " (int8, made by the gate and up projections)" : glu_input).c_str()),
                      kernels);
        std::string weight_type = model::type_name(type);  // as in the kernel names: q4_k
        for (char& ch : weight_type) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        for (const char* proj : {"gate", "up"})
          CHECK_MESSAGE(has(kernels, cat(proj, "  moe_matvec_q8_", weight_type, " + fused rmsnorm input (quantize_q8) + "
                                         "makes the down projection's int8 input").c_str()) == q8,
                        kernels);
        for (const char* proj : {"gate", "up", "down"})
          CHECK_MESSAGE(!has(kernels, cat(proj, "  moe_matvec_q8_", weight_type, " + quantize_q8").c_str()), kernels);
      }
  // moe_combine + residual add + the next layer's norm inside a decode matvec: with int8 activations the combine's
  // dispatch also makes that matvec's int8 input (quantize_q8_combine), and the matvec quantizes nothing.
  for (int64_t n : {int64_t(1), int64_t(3)})
    for (bool q8 : {true, false}) {
      CAPTURE(n);
      CAPTURE(q8);
      const int64_t k = 3, width = 96, n_experts = 6, rows = 40;
      OpCase c(n, 8);
      const BufferId logits = c.input("router_logits", n * n_experts, seed++, 2.f);
      const BufferId experts = c.plan.add_buffer("experts", engine::ElemType::I32, engine::BufferRole::Scratch, n * k);
      const BufferId weights = c.output("expert_weights", n * k);
      const BufferId down = c.input("down", n * k * width, seed++);
      const BufferId combined = c.output("moe_out", n * width);
      const BufferId x = c.input("x", n * width, seed++);
      const BufferId xb = c.output("xb", n * width);
      const BufferId q = c.output("q", n * rows);
      const engine::WeightId norm_w = c.weight("attn_norm", GgmlType::F32, 1, width, seed++, 0.5f, 1.5f);
      const engine::WeightId wq = c.weight("wq", GgmlType::Q8_0, rows, width, seed++);
      c.add("route", engine::MoeRouteOp{logits, experts, weights, n, n_experts, k, MoeGating::SoftmaxTopK, true});
      c.add("combine", engine::MoeCombineOp{down, weights, combined, n, k, width});
      c.add("residual", engine::AddOp{x, combined, n * width});
      c.add("attn_norm", engine::RmsNormOp{x, xb, norm_w, n, width, 0, 1e-6f});
      c.add("attn_q", engine::MatMulOp{xb, q, wq, n, width, rows});
      const std::string kernels = compare_fused(c, q, 1e-9, q8);
      if (q8) {
        CHECK_MESSAGE(has(kernels, "combine  quantize_q8_combine"), kernels);
        CHECK_MESSAGE(!has(kernels, "attn_q  matvec_q8_q8_0 + quantize_q8"), kernels);
      } else {
        CHECK_MESSAGE(has(kernels, "combine  moe_combine_f32 (fused residual add)"), kernels);
      }
      compare(c, x, 1e-12);
    }
  // moe_combine + residual add: the combine accumulates into x (decode and prefill token counts).
  for (int64_t n : {int64_t(1), int64_t(5)}) {
    CAPTURE(n);
    const int64_t k = 3, width = 70, n_experts = 6;
    OpCase c(n, 8);
    const BufferId logits = c.input("router_logits", n * n_experts, seed++, 2.f);
    const BufferId experts = c.plan.add_buffer("experts", engine::ElemType::I32, engine::BufferRole::Scratch, n * k);
    const BufferId weights = c.output("expert_weights", n * k);
    const BufferId down = c.input("down", n * k * width, seed++);
    const BufferId combined = c.output("moe_out", n * width);
    const BufferId x = c.input("x", n * width, seed++);
    c.add("route", engine::MoeRouteOp{logits, experts, weights, n, n_experts, k, MoeGating::SoftmaxTopK, true});
    c.add("combine", engine::MoeCombineOp{down, weights, combined, n, k, width});
    c.add("residual", engine::AddOp{x, combined, n * width});
    const std::string kernels = compare_fused(c, x, 1e-12);
    CHECK_MESSAGE(has(kernels, "moe_combine_f32 (fused residual add)"), kernels);
    CHECK_MESSAGE(has(kernels, "residual  (fused into combine)"), kernels);
  }
}

TEST_CASE("vk decode fusion: the MoE route inside the router matvec (its last workgroup), or right after it") {
  // The router's float types route in the matvec (matvec_route_<type>); a quantized router keeps moe_route's
  // dispatch after a barrier inside the same record. Both gating rules, with and without renormalization, gpt-oss's
  // router bias, more experts than the router's workgroup has invocations, and decode steps of 1 and 3 tokens (the
  // last workgroup routes every token). Prefill-sized steps keep the route's own dispatch.
  struct RouteShape {
    GgmlType type;
    int64_t n, n_experts, k, dim;
    MoeGating gating;
    bool normalize, bias;
  };
  const RouteShape shapes[] = {
      {GgmlType::F32, 1, 128, 8, 256, MoeGating::SoftmaxTopK, true, false},
      {GgmlType::F32, 3, 130, 8, 70, MoeGating::SoftmaxTopK, false, false},
      {GgmlType::F16, 1, 37, 5, 96, MoeGating::TopKSoftmax, true, true},
      {GgmlType::BF16, 3, 32, 4, 64, MoeGating::TopKSoftmax, false, true},
      {GgmlType::Q8_0, 1, 40, 4, 128, MoeGating::SoftmaxTopK, true, false},
      {GgmlType::F32, 6, 24, 3, 64, MoeGating::SoftmaxTopK, true, false},  // not a decode step
  };
  uint32_t seed = 1700;
  for (const RouteShape& s : shapes) {
    const std::string type_name = model::type_name(s.type);
    CAPTURE(type_name);
    CAPTURE(s.n);
    CAPTURE(s.n_experts);
    CAPTURE(int(s.gating));
    CAPTURE(s.bias);
    OpCase c(s.n, 8);
    const BufferId x = c.input("x", s.n * s.dim, seed++);
    const BufferId xb = c.output("xb", s.n * s.dim);
    const BufferId logits = c.output("router_logits", s.n * s.n_experts);
    const BufferId experts =
        c.plan.add_buffer("experts", engine::ElemType::I32, engine::BufferRole::Scratch, s.n * s.k);
    const BufferId weights = c.output("expert_weights", s.n * s.k);
    const engine::WeightId norm_w = c.weight("ffn_norm", GgmlType::F32, 1, s.dim, seed++, 0.5f, 1.5f);
    const engine::WeightId w_router = c.weight("router", s.type, s.n_experts, s.dim, seed++);
    c.add("ffn_norm", engine::RmsNormOp{x, xb, norm_w, s.n, s.dim, 0, 1e-6f});
    c.add("router", engine::MatMulOp{xb, logits, w_router, s.n, s.dim, s.n_experts});
    if (s.bias) {
      const engine::WeightId b = c.weight("router_b", GgmlType::F32, 1, s.n_experts, seed++);
      c.add("router.bias", engine::AddBiasOp{logits, b, s.n, s.n_experts});
    }
    c.add("route", engine::MoeRouteOp{logits, experts, weights, s.n, s.n_experts, s.k, s.gating, s.normalize});
    // f32 activations for the quantized router: int8 ones round its logits by about 1e-3 of their spread, enough
    // to swap two experts of close logits against the CPU's f32 product.
    const bool q8 = model::traits(s.type).block_elems == 1;
    const std::string kernels = compare_fused(c, experts, 0.0, q8);  // the same experts in the same order
    compare(c, weights, 1e-10, vk::MatmulKernel::automatic, 2e-6, nullptr, q8);
    compare(c, logits, 1e-9, vk::MatmulKernel::automatic, 2e-6, nullptr, q8);
    const bool decode = s.n <= 4;
    CHECK_MESSAGE(has(kernels, "route  (fused into router)") == decode, kernels);
    const bool inside = decode && model::traits(s.type).block_elems == 1;
    CHECK_MESSAGE(has(kernels, "fused route (") == inside, kernels);
    if (decode && !inside) CHECK_MESSAGE(has(kernels, "moe_route_f32"), kernels);
    if (s.bias) CHECK_MESSAGE(has(kernels, "router.bias  (fused into router)") == decode, kernels);
  }
}

TEST_CASE("vk decode fusion: rope of q and k with the kv-cache writes in one dispatch") {
  uint32_t seed = 1100;
  // f32 caches over every shape; f16 caches (the engine's default: rope_kv_f32_kvf16, paged rows) over a subset.
  for (engine::ElemType kv : {engine::ElemType::F32, engine::ElemType::F16})
    for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
      for (int64_t head_dim : {int64_t(64), int64_t(40)})
        for (bool partial : {false, true})
          for (bool factors : {false, true})
            for (int64_t n : {int64_t(1), int64_t(3)})
              for (bool v_write : {true, false}) {
                const bool f16 = kv == engine::ElemType::F16;
                if (f16 && (head_dim != 64 || !factors)) continue;
                CAPTURE(f16);
                CAPTURE(int(pairing));
                CAPTURE(head_dim);
                CAPTURE(partial);
                CAPTURE(factors);
                CAPTURE(n);
                CAPTURE(v_write);
                auto rc = test::rope_kv_case(pairing, n, head_dim, partial, factors, v_write, seed, kv);
                const std::string kernels = compare_fused(rc.c, rc.k_cache, f16 ? 1e-10 : 1e-8);
                CHECK_MESSAGE(has(kernels, f16 ? "rope_q  rope_kv_f32_kvf16" : "rope_q  rope_kv_f32"), kernels);
                CHECK_MESSAGE(has(kernels, "k_cache  (fused into rope_q)"), kernels);
                CHECK_MESSAGE(has(kernels, "v_cache  (fused into rope_q)") == v_write, kernels);
                compare(rc.c, rc.q, 1e-8);
                compare(rc.c, rc.k, 1e-8);
                compare(rc.c, rc.v_cache, f16 ? 1e-10 : 1e-12);
              }
  // A batched decode step (one token per sequence, up to 64) is fused too, over the engine's f16 cache.
  {
    auto rc = test::rope_kv_case(model::RopePairing::NeoxHalves, 37, 64, true, true, true, seed, engine::ElemType::F16);
    const std::string kernels = compare_fused(rc.c, rc.k_cache, 1e-10);
    CHECK_MESSAGE(has(kernels, "rope_q  rope_kv_f32_kvf16"), kernels);
    CHECK_MESSAGE(has(kernels, "v_cache  (fused into rope_q)"), kernels);
    compare(rc.c, rc.q, 1e-8);
    compare(rc.c, rc.k, 1e-8);
    compare(rc.c, rc.v_cache, 1e-10);
  }
  // Prefill-sized steps keep the separate kernels.
  auto rc = test::rope_kv_case(model::RopePairing::Adjacent, 65, 64, false, false, true, seed);
  const std::string kernels = compare_fused(rc.c, rc.k_cache, 1e-8);
  CHECK_MESSAGE(!has(kernels, "rope_kv"), kernels);
}

// qwen3's attn_q_norm and attn_k_norm before the rope: all four ops and the cache writes in one qk_norm_rope_kv
// dispatch, a workgroup per head (heads of fewer, as many and more pairs than its 64 invocations).
TEST_CASE("vk decode fusion: per-head q/k norms, rope and the kv-cache writes in one dispatch") {
  uint32_t seed = 1130;
  for (engine::ElemType kv : {engine::ElemType::F32, engine::ElemType::F16})
    for (auto pairing : {model::RopePairing::Adjacent, model::RopePairing::NeoxHalves})
      for (int64_t head_dim : {int64_t(40), int64_t(128), int64_t(256)})
        for (bool partial : {false, true})
          for (int64_t n : {int64_t(1), int64_t(3)}) {
            const bool f16 = kv == engine::ElemType::F16, v_write = n == 1 || partial;
            if (f16 && (head_dim != 128 || partial)) continue;
            CAPTURE(f16);
            CAPTURE(int(pairing));
            CAPTURE(head_dim);
            CAPTURE(partial);
            CAPTURE(n);
            auto rc = test::rope_kv_case(pairing, n, head_dim, partial, true, v_write, seed, kv, false, true);
            const std::string kernels = compare_fused(rc.c, rc.k_cache, f16 ? 1e-8 : 1e-8);
            CHECK_MESSAGE(has(kernels, f16 ? "rope_q  qk_norm_rope_kv_f32_kvf16" : "rope_q  qk_norm_rope_kv_f32"),
                          kernels);
            CHECK_MESSAGE(has(kernels, "attn_q_norm  (fused into rope_q)"), kernels);
            CHECK_MESSAGE(has(kernels, "attn_k_norm  (fused into rope_q)"), kernels);
            CHECK_MESSAGE(has(kernels, "k_cache  (fused into rope_q)"), kernels);
            CHECK_MESSAGE(has(kernels, "v_cache  (fused into rope_q)") == v_write, kernels);
            compare(rc.c, rc.q, 1e-8);
            compare(rc.c, rc.k, 1e-8);
            compare(rc.c, rc.v_cache, f16 ? 1e-10 : 1e-12);
          }
  // Prefill-sized steps keep the separate kernels.
  auto rc = test::rope_kv_case(model::RopePairing::NeoxHalves, 65, 128, false, false, true, seed, engine::ElemType::F32,
                               false, true);
  const std::string kernels = compare_fused(rc.c, rc.k_cache, 1e-8);
  CHECK_MESSAGE(!has(kernels, "rope_kv"), kernels);
  CHECK_MESSAGE(has(kernels, "attn_q_norm  rmsnorm_f32"), kernels);
}

TEST_CASE("vk decode fusion: no rope_kv over q8_0 caches (rope, then kv_write_q8)") {
  uint32_t seed = 1150;
  for (int64_t n : {int64_t(1), int64_t(3)}) {
    CAPTURE(n);
    // Rows of 2 x 64 elements: 4 q8_0 blocks. Both backends quantize the same rotated f32 K rows.
    // OpCase::input takes F32 and F16 buffers: the caches are built as F32 ones and retyped before preparing.
    auto rc = test::rope_kv_case(model::RopePairing::NeoxHalves, n, 64, false, true, true, seed);
    for (engine::BufferId b : {rc.k_cache, rc.v_cache})
      rc.c.plan.buffers[size_t(b)].type = engine::ElemType::Q8_0;
    const std::string kernels = compare_fused(rc.c, rc.k_cache, 1e-10);
    CHECK_MESSAGE(!has(kernels, "rope_kv"), kernels);
    CHECK_MESSAGE(has(kernels, "kv_write_q8"), kernels);
    compare(rc.c, rc.q, 1e-8);
    compare(rc.c, rc.v_cache, 1e-10);
  }
}

// Split-K sums added by their readers (OpEncoder::flush_split_sums, GRETA_VK_GEMM_SPLIT=3 on every GEMM): a batched
// step's ffn_norm over the residual stream its attn_output GEMM added into (fused residual add), rope_kv over split
// Q, K and V, and a GLU over split gate and up. Each reader adds the partials itself and writes the sums back: the
// residual stream, gate and V are checked after the step, and a later op reads the residual stream and the gate.
// A partial rotation leaves q's past-rotary dims unread by rope_kv: there the sums keep their own stage, unless the
// per-head q/k norms come first (qwen3: qk_norm_rope_kv writes every dim). 9 and 16 tokens (the GEMMs, not the
// matvecs), 101-row FFN (partial tiles).
TEST_CASE("vk split-K sums added by the norm, rope_kv and the GLU that read them") {
  greta::vk::test::ScopedEnv split("GRETA_VK_GEMM_SPLIT", "3");
  uint32_t seed = 1500;
  for (int64_t n : {int64_t(9), int64_t(16)})
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0}) {
      const std::string type_name = model::type_name(type);
      CAPTURE(n);
      CAPTURE(type_name);
      const int64_t dim = 256, ffn = 101;
      OpCase c(n, 16);
      const BufferId attn = c.input("attn", n * dim, seed++), residual = c.input("residual", n * dim, seed++);
      const BufferId o = c.output("o", n * dim), normed = c.output("normed", n * dim);
      const BufferId gate = c.output("gate", n * ffn), up = c.output("up", n * ffn), h = c.output("h", n * ffn);
      const BufferId later = c.input("later", n * dim, seed++), gate_reader = c.input("gate_reader", n * ffn, seed++);
      c.add("attn_output", MatMulOp{attn, o, c.weight("w_o", type, dim, dim, seed++), n, dim, dim});
      c.add("attn_residual", AddOp{residual, o, n * dim});
      c.add("ffn_norm", RmsNormOp{residual, normed, c.weight("w_norm", GgmlType::F32, 1, dim, seed++, 0.5f, 1.5f),
                                  n, dim, 0, 1e-5f});
      c.add("ffn_gate", MatMulOp{normed, gate, c.weight("w_gate", type, ffn, dim, seed++), n, dim, ffn});
      c.add("ffn_up", MatMulOp{normed, up, c.weight("w_up", type, ffn, dim, seed++), n, dim, ffn});
      c.add("ffn_glu", GluOp{gate, up, h, n * ffn, GluKind::SiLU});
      c.add("later", AddOp{later, residual, n * dim});
      c.add("gate_reader", AddOp{gate_reader, gate, n * ffn});
      std::string kernels;
      compare(c, h, 1e-9, vk::MatmulKernel::automatic, 2e-6, &kernels);
      CHECK_MESSAGE(has(kernels, "split-K "), kernels);  // 3, or 2 where a K split holds whole K steps of 64
      CHECK_MESSAGE(has(kernels, "ffn_norm  rmsnorm_f32"), kernels);
      CHECK_MESSAGE(has(kernels, "adds its input's split-K partials"), kernels);  // the norm
      CHECK_MESSAGE(has(kernels, "adds gate's and up's split-K partials"), kernels);
      CHECK_MESSAGE(!has(kernels, "add_splits"), kernels);
      for (BufferId b : {residual, normed, gate, up, later, gate_reader}) compare(c, b, 1e-9);
    }
  for (bool qk_norm : {false, true})
  for (bool partial : {false, true}) {
    CAPTURE(qk_norm);
    CAPTURE(partial);
    const int64_t n = 9, dim = 256, heads = 4, kv_heads = 2, head_dim = 32, rope_dims = partial ? 16 : 32;
    OpCase c(n, 64);
    c.start_pos = 40;
    const BufferId x = c.input("x", n * dim, seed++);
    const BufferId q = c.output("q", n * heads * head_dim), k = c.output("k", n * kv_heads * head_dim),
                   v = c.output("v", n * kv_heads * head_dim);
    const int64_t rows = c.plan.shape.kv.cache_rows(), kv_width = kv_heads * head_dim;
    const BufferId k_cache = c.input("k_cache", rows * kv_width, seed++, 1.f, engine::ElemType::F16);
    const BufferId v_cache = c.input("v_cache", rows * kv_width, seed++, 1.f, engine::ElemType::F16);
    c.add("attn_q", MatMulOp{x, q, c.weight("w_q", GgmlType::Q4_K, heads * head_dim, dim, seed++), n, dim,
                             heads * head_dim});
    c.add("attn_k", MatMulOp{x, k, c.weight("w_k", GgmlType::Q4_K, kv_width, dim, seed++), n, dim, kv_width});
    c.add("attn_v", MatMulOp{x, v, c.weight("w_v", GgmlType::Q4_K, kv_width, dim, seed++), n, dim, kv_width});
    const auto pos = c.plan.positions;
    if (qk_norm) {
      c.add("attn_q_norm", RmsNormOp{q, q, c.weight("q_norm", GgmlType::F32, 1, head_dim, seed++, 0.5f, 1.5f),
                                     n * heads, head_dim, 0, 1e-6f});
      c.add("attn_k_norm", RmsNormOp{k, k, c.weight("k_norm", GgmlType::F32, 1, head_dim, seed++, 0.5f, 1.5f),
                                     n * kv_heads, head_dim, 0, 1e-6f});
    }
    c.add("rope_q", RopeOp{q, pos, n, heads, head_dim, rope_dims, model::RopePairing::NeoxHalves, 10000.f, 1.f});
    c.add("rope_k", RopeOp{k, pos, n, kv_heads, head_dim, rope_dims, model::RopePairing::NeoxHalves, 10000.f, 1.f});
    c.add("k_cache", KvWriteOp{k, k_cache, c.kv_rows, n, kv_width, rows});
    c.add("v_cache", KvWriteOp{v, v_cache, c.kv_rows, n, kv_width, rows});
    std::string kernels;
    compare(c, k_cache, 1e-8, vk::MatmulKernel::automatic, 2e-6, &kernels);
    CHECK_MESSAGE(has(kernels, "split-K "), kernels);  // 3, or 2 where a K split holds whole K steps of 64
    CHECK_MESSAGE(has(kernels, qk_norm ? "qk_norm_rope_kv_f32_kvf16" : "rope_q  rope_kv_f32_kvf16"), kernels);
    CHECK_MESSAGE(has(kernels, "adds the split-K partials of q, k and v") == (!partial || qk_norm), kernels);
    CHECK_MESSAGE(has(kernels, "add_splits") == (partial && !qk_norm), kernels);
    for (BufferId b : {q, k, v}) compare(c, b, 1e-8);
    compare(c, v_cache, 1e-8);
  }
}
