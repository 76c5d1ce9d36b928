// Reference (CPU) codecs for every GGUF weight type GRETA reads. Block layouts follow ggml exactly (ggml-common.h);
// each block struct below documents its byte layout. These are the oracles every GPU dequantizer is checked against.
#pragma once
#include <cstdint>

#include "model/tensor_types.h"

namespace greta::model {

// Decodes n elements (n a multiple of the type's block_elems) from the packed bytes at src into dst.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Encodes n floats into the packed type at dst (row_bytes(type, n) bytes). Supported at least for F32, F16, BF16,
// Q8_0, Q4_0, Q4_K, Q6_K; throws greta::Error naming the type for the others.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
bool can_quantize(GgmlType type);

}  // namespace greta::model
