// GgmlType -> shader variant of each weight-reading kernel family. The variants are declared in shaders/shaders.cmake
// (one per type and family; matvec_block and matvec_q8 for the quantized types only); this table is the only place
// that pairs them, by typed ID.
#include <array>
#include <optional>

#include "core/error.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

namespace {

struct WeightVariants {
  model::GgmlType type;
  ShaderId embed, matvec, matmul_tiled, matmul_coopmat, matmul_coopmat_x16;  // x16: f16 activations (X_F16)
  std::optional<ShaderId> matvec_block, matvec_q8;  // quantized types only (q8: int8 activations)
  std::optional<ShaderId> matmul_coopmat_q8 = std::nullopt;  // int8 cooperative matrices: Q4_0, Q4_K, Q6_K
};

using G = model::GgmlType;
using S = ShaderId;
constexpr WeightVariants k_variants[] = {
    {G::F32, S::embed_f32, S::matvec_f32, S::matmul_tiled_f32, S::matmul_coopmat_f32,
     S::matmul_coopmat_x16_f32, std::nullopt, std::nullopt},
    {G::F16, S::embed_f16, S::matvec_f16, S::matmul_tiled_f16, S::matmul_coopmat_f16,
     S::matmul_coopmat_x16_f16, std::nullopt, std::nullopt},
    {G::BF16, S::embed_bf16, S::matvec_bf16, S::matmul_tiled_bf16, S::matmul_coopmat_bf16,
     S::matmul_coopmat_x16_bf16, std::nullopt, std::nullopt},
    {G::Q4_0, S::embed_q4_0, S::matvec_q4_0, S::matmul_tiled_q4_0, S::matmul_coopmat_q4_0,
     S::matmul_coopmat_x16_q4_0,
     S::matvec_block_q4_0, S::matvec_q8_q4_0, S::matmul_coopmat_q8_q4_0},
    {G::Q4_1, S::embed_q4_1, S::matvec_q4_1, S::matmul_tiled_q4_1, S::matmul_coopmat_q4_1,
     S::matmul_coopmat_x16_q4_1,
     S::matvec_block_q4_1, S::matvec_q8_q4_1},
    {G::Q5_0, S::embed_q5_0, S::matvec_q5_0, S::matmul_tiled_q5_0, S::matmul_coopmat_q5_0,
     S::matmul_coopmat_x16_q5_0,
     S::matvec_block_q5_0, S::matvec_q8_q5_0},
    {G::Q5_1, S::embed_q5_1, S::matvec_q5_1, S::matmul_tiled_q5_1, S::matmul_coopmat_q5_1,
     S::matmul_coopmat_x16_q5_1,
     S::matvec_block_q5_1, S::matvec_q8_q5_1},
    {G::Q8_0, S::embed_q8_0, S::matvec_q8_0, S::matmul_tiled_q8_0, S::matmul_coopmat_q8_0,
     S::matmul_coopmat_x16_q8_0,
     S::matvec_block_q8_0, S::matvec_q8_q8_0},
    {G::Q2_K, S::embed_q2_k, S::matvec_q2_k, S::matmul_tiled_q2_k, S::matmul_coopmat_q2_k,
     S::matmul_coopmat_x16_q2_k,
     S::matvec_block_q2_k, S::matvec_q8_q2_k},
    {G::Q3_K, S::embed_q3_k, S::matvec_q3_k, S::matmul_tiled_q3_k, S::matmul_coopmat_q3_k,
     S::matmul_coopmat_x16_q3_k,
     S::matvec_block_q3_k, S::matvec_q8_q3_k},
    {G::Q4_K, S::embed_q4_k, S::matvec_q4_k, S::matmul_tiled_q4_k, S::matmul_coopmat_q4_k,
     S::matmul_coopmat_x16_q4_k,
     S::matvec_block_q4_k, S::matvec_q8_q4_k, S::matmul_coopmat_q8_q4_k},
    {G::Q5_K, S::embed_q5_k, S::matvec_q5_k, S::matmul_tiled_q5_k, S::matmul_coopmat_q5_k,
     S::matmul_coopmat_x16_q5_k,
     S::matvec_block_q5_k, S::matvec_q8_q5_k},
    {G::Q6_K, S::embed_q6_k, S::matvec_q6_k, S::matmul_tiled_q6_k, S::matmul_coopmat_q6_k,
     S::matmul_coopmat_x16_q6_k,
     S::matvec_block_q6_k, S::matvec_q8_q6_k, S::matmul_coopmat_q8_q6_k},
    {G::IQ4_NL, S::embed_iq4_nl, S::matvec_iq4_nl, S::matmul_tiled_iq4_nl, S::matmul_coopmat_iq4_nl,
     S::matmul_coopmat_x16_iq4_nl,
     S::matvec_block_iq4_nl, S::matvec_q8_iq4_nl},
    {G::IQ4_XS, S::embed_iq4_xs, S::matvec_iq4_xs, S::matmul_tiled_iq4_xs, S::matmul_coopmat_iq4_xs,
     S::matmul_coopmat_x16_iq4_xs,
     S::matvec_block_iq4_xs, S::matvec_q8_iq4_xs},
    {G::MXFP4, S::embed_mxfp4, S::matvec_mxfp4, S::matmul_tiled_mxfp4, S::matmul_coopmat_mxfp4,
     S::matmul_coopmat_x16_mxfp4,
     S::matvec_block_mxfp4, S::matvec_q8_mxfp4},
};

}  // namespace

ShaderId weight_shader(WeightKernel kernel, model::GgmlType type) {
  for (const auto& v : k_variants) {
    if (v.type != type) continue;
    switch (kernel) {
      case WeightKernel::embed: return v.embed;
      case WeightKernel::matvec: return v.matvec;
      case WeightKernel::matvec_block:
        if (v.matvec_block) return *v.matvec_block;
        fail("vk: weights of type ", model::type_name(type), " have no block-wise matvec kernel");
      case WeightKernel::matvec_q8:
        if (v.matvec_q8) return *v.matvec_q8;
        fail("vk: weights of type ", model::type_name(type), " have no int8-activation matvec kernel");
      case WeightKernel::matmul_tiled: return v.matmul_tiled;
      case WeightKernel::matmul_coopmat: return v.matmul_coopmat;
      case WeightKernel::matmul_coopmat_x16: return v.matmul_coopmat_x16;
      case WeightKernel::matmul_coopmat_q8:
        if (v.matmul_coopmat_q8) return *v.matmul_coopmat_q8;
        fail("vk: weights of type ", model::type_name(type), " have no int8 cooperative-matrix GEMM");
    }
  }
  fail("vk: weights of type ", model::type_name(type), " are not supported by the Vulkan kernels");
}

bool has_weight_shader(WeightKernel kernel, model::GgmlType type) {
  for (const auto& v : k_variants)
    if (v.type == type) {
      if (kernel == WeightKernel::matvec_block) return v.matvec_block.has_value();
      if (kernel == WeightKernel::matvec_q8) return v.matvec_q8.has_value() && shader_available(*v.matvec_q8);
      if (kernel == WeightKernel::matmul_coopmat_q8)
        return v.matmul_coopmat_q8.has_value() && shader_available(*v.matmul_coopmat_q8);
      return true;
    }
  return false;
}

uint32_t to_u32(int64_t v, const char* what) {
  if (v < 0 || v > int64_t(UINT32_MAX)) fail("vk: ", what, " = ", v, " does not fit the kernels' 32-bit indices");
  return uint32_t(v);
}

}  // namespace greta::vk
