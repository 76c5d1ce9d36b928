# Every shader variant GRETA builds: greta_add_shader(ID SOURCE [DEFINES ...] [REQUIRES coopmat]).
# IDs become greta::vk::ShaderId enumerators (build/generated/vk/shader_ids.h).
# DEFINES choose types and extensions only; workgroup sizes and tiles are specialization constants.

# Runtime tests and benchmarks.
greta_add_shader(fill_u32 fill.comp)
greta_add_shader(alu_rate alu_rate.comp REQUIRES intdot)  # vk_alu_bench
greta_add_shader(residency_probe residency_probe.comp)  # vk_alu_bench
greta_add_shader(copy_u32 copy.comp DEFINES ELEM=uint)
greta_add_shader(copy_u32x4 copy.comp DEFINES ELEM=uvec4)
greta_add_shader(add_f32 add.comp DEFINES T=float)
greta_add_shader(add_f16 add.comp DEFINES T=float16_t FLOAT16)
greta_add_shader(coopmat_tile_f16_f32 coopmat_tile.comp REQUIRES coopmat)

# Weight-format decoders (shaders/dequant.glsl) and their per-type test variants (dequant_rows_<type>).
include(${CMAKE_CURRENT_LIST_DIR}/dequant.cmake)

# The forward pass (src/vk/backend/op_*.cpp), f32 activations.
greta_add_shader(rmsnorm_f32 rmsnorm.comp)
greta_add_shader(rope_f32 rope.comp)
# KV-cache kernels: one variant per cache element type (f32; f16 through 16-bit storage, CACHE_F16; Q8_0, CACHE_Q8:
# engine/kv_q8.h's blocks, the readers' variants suffixed _kvq8), picked by the cache buffer's type (op_kv_write.cpp,
# op_attention.cpp, op_rope_kv.cpp; rope_kv has no Q8_0 variant: fusion.cpp does not fuse over Q8_0 caches).
greta_add_shader(kv_write_f32 kv_write.comp)
greta_add_shader(kv_write_f16 kv_write.comp DEFINES CACHE_F16)
greta_add_shader(kv_write_f32_vec4 kv_write.comp DEFINES VEC4)
greta_add_shader(kv_write_f16_vec4 kv_write.comp DEFINES CACHE_F16 VEC4)
greta_add_shader(kv_write_q8 kv_write.comp DEFINES CACHE_Q8)
greta_add_shader(attention_f32 attention.comp)
greta_add_shader(attention_f32_kvf16 attention.comp DEFINES CACHE_F16)
greta_add_shader(attention_f32_kvq8 attention.comp DEFINES CACHE_Q8)
greta_add_shader(gather_rows_f32 gather_rows.comp)
greta_add_shader(glu_f32 glu.comp)
greta_add_shader(glu_f32_q8 glu.comp DEFINES WITH_Q8_OUT)  # also writes the int8 GEMM's input (subgroup shuffles)
greta_add_shader(add_inplace_f32 add_inplace.comp)
greta_add_shader(add_splits_f32 add_splits.comp)
greta_add_shader(add_bias_f32 add_bias.comp)
greta_add_shader(convert_f16 convert_f16.comp)

# Ops that read weights: one variant per weight type, the type chosen by WTYPE_<T> (dequant.glsl). The host maps a
# GgmlType to these IDs in src/vk/backend/weight_shaders.cpp.
set(GRETA_WEIGHT_TYPES f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4)
foreach(t IN LISTS GRETA_WEIGHT_TYPES)
  string(TOUPPER "${t}" T)
  greta_add_shader(embed_${t} embed.comp DEFINES WTYPE_${T})
  greta_add_shader(matvec_${t} matvec.comp DEFINES WTYPE_${T})
  greta_add_shader(matmul_tiled_${t} matmul_tiled.comp DEFINES WTYPE_${T})
  greta_add_shader(matmul_coopmat_${t} matmul_coopmat.comp DEFINES WTYPE_${T} REQUIRES coopmat)
  greta_add_shader(matmul_coopmat_x16_${t} matmul_coopmat.comp DEFINES WTYPE_${T} X_F16 REQUIRES coopmat)
endforeach()

# Batched decode steps (5-64 tokens) on int8 cooperative matrices with int8 activations (quantize_q8.comp's rows):
# the types whose scales are per 32 elements, and Q6_K (two products per block: op_matmul.cpp, matmul_coopmat_q8).
foreach(t q4_0 q4_k q6_k)
  string(TOUPPER "${t}" T)
  greta_add_shader(matmul_coopmat_q8_${t} matmul_coopmat_q8.comp DEFINES WTYPE_${T} REQUIRES coopmat intdot)
endforeach()

# Mixture of experts (src/vk/backend/op_moe.cpp): routing, the weighted sum, and the expert matmuls per weight type:
# moe_matvec_<type> for a few tokens (each slot reads only its expert's rows), moe_gemm_<type> over the slots
# grouped by expert (moe_group) for prefill and batched steps.
greta_add_shader(moe_route_f32 moe_route.comp)
# A decode router that routes in its last workgroup (matvec.comp's ROUTE; op_matvec.cpp): the float router types,
# which is what published MoE files carry (llama.cpp keeps ffn_gate_inp in F32).
foreach(t f32 f16 bf16)
  string(TOUPPER "${t}" T)
  greta_add_shader(matvec_route_${t} matvec.comp DEFINES WTYPE_${T} ROUTE)
endforeach()
greta_add_shader(moe_combine_f32 moe_combine.comp)
greta_add_shader(moe_group moe_group.comp)
foreach(t IN LISTS GRETA_WEIGHT_TYPES)
  string(TOUPPER "${t}" T)
  greta_add_shader(moe_matvec_${t} moe_matvec.comp DEFINES WTYPE_${T})
  greta_add_shader(moe_gemm_${t} moe_gemm.comp DEFINES WTYPE_${T})
  if(NOT t STREQUAL "f32")  # the grouped GEMM on cooperative matrices (matmul_coopmat.comp's MOE variant, f16 X)
    greta_add_shader(moe_coopmat_x16_${t} matmul_coopmat.comp DEFINES WTYPE_${T} X_F16 MOE REQUIRES coopmat)
  endif()
endforeach()

# Prefill attention on cooperative matrices (src/vk/backend/op_attention.cpp picks it on devices that have them).
greta_add_shader(attention_coopmat_f16 attention_coopmat.comp REQUIRES coopmat)
greta_add_shader(attention_coopmat_f16_kvf16 attention_coopmat.comp DEFINES CACHE_F16 REQUIRES coopmat)
greta_add_shader(attention_coopmat_f16_kvq8 attention_coopmat.comp DEFINES CACHE_Q8 REQUIRES coopmat)

# Decode matvec, block-wise (shaders/matvec_block.comp): the quantized types, chosen by op_matvec.cpp (f32/f16/bf16
# keep matvec_<type>); matvec_q8_<type> takes int8 activations (X_Q8) on devices with integer dot products. Paired
# with GgmlTypes in src/vk/backend/weight_shaders.cpp.
foreach(t q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4)
  string(TOUPPER "${t}" T)
  greta_add_shader(matvec_block_${t} matvec_block.comp DEFINES WTYPE_${T})
  greta_add_shader(matvec_q8_${t} matvec_block.comp DEFINES WTYPE_${T} X_Q8 REQUIRES intdot)
  # The decode expert matmul on the same kernels (MOE: each slot's expert selects its rows; op_moe.cpp).
  greta_add_shader(moe_matvec_block_${t} matvec_block.comp DEFINES WTYPE_${T} MOE)
  greta_add_shader(moe_matvec_q8_${t} matvec_block.comp DEFINES WTYPE_${T} X_Q8 MOE REQUIRES intdot)
endforeach()
# Their input quantizer (int8 per 32 elements; plain, rmsnorm or swiglu input), used by matvec_q8_<type>.
greta_add_shader(quantize_q8 quantize_q8.comp)
greta_add_shader(quantize_q8_combine quantize_q8.comp DEFINES COMBINE)
greta_add_shader(attention_combine_f32 attention_combine.comp)
greta_add_shader(attention_decode_f32 attention_decode.comp)
greta_add_shader(attention_decode_f32_kvf16 attention_decode.comp DEFINES CACHE_F16)
greta_add_shader(attention_decode_f32_kvq8 attention_decode.comp DEFINES CACHE_Q8)
# Batched decode attention of GQA heads on cooperative matrices (f16 caches; op_attention.cpp picks it).
greta_add_shader(attention_decode_coopmat_f16_kvf16 attention_decode_coopmat.comp REQUIRES coopmat)
# Its tile of 8 head columns (16x8x16 products), where the device has them (op_attention.cpp).
greta_add_shader(attention_decode_coopmat_n8_f16_kvf16 attention_decode_coopmat.comp DEFINES NH=8 REQUIRES coopmat)
# Decode fusions (src/vk/backend/fusion.h): RoPE of Q and K with the KV-cache append in one dispatch.
greta_add_shader(rope_kv_f32 rope_kv.comp)
greta_add_shader(rope_kv_f32_kvf16 rope_kv.comp DEFINES CACHE_F16)
greta_add_shader(qk_norm_rope_kv_f32 qk_norm_rope_kv.comp)
greta_add_shader(qk_norm_rope_kv_f32_kvf16 qk_norm_rope_kv.comp DEFINES CACHE_F16)
