// Reference (CPU) codecs for every GGUF weight type GRETA reads. Block layouts follow ggml exactly (ggml-common.h);
// each block struct in quant_blocks.h documents its byte layout. These are the oracles every GPU dequantizer is
// checked against, and the CPU backend's row kernels.
//
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4
// (decode, dot and encode).
// Rows may start at any address (blocks are read byte-wise). Every function throws greta::Error naming the type for
// an unsupported type, a negative n, or an n that is not a multiple of the type's block_elems.
#pragma once
#include <cstdint>

#include "model/tensor_types.h"

namespace greta::model {

// Decodes n elements (n a multiple of the type's block_elems) from the packed bytes at src into dst. The values are
// bit-identical to ggml's dequantize_row_* (same expressions, same operand order).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Fused dequantize + dot product: sum_i w[i] * x[i] over the n weights of one packed row, without materializing the
// row. Each w[i] is computed exactly as dequantize_row computes it; the products are accumulated in 32 float lanes
// (lane = i % 32), each lane summing at most 256 products before the lanes are folded into a double accumulator; the
// double total is rounded to float at the end. So the result equals a double-precision dot of the dequantized row
// with x to within a few float ulps of the partial sums (|error| <~ 256 * 2^-24 * sum |w[i] x[i]|).
float dot_row(GgmlType type, const void* row, const float* x, int64_t n);

// Encodes n floats into the packed type at dst (row_bytes(type, n) bytes). Supported for F32, F16, BF16 (round to
// nearest even) and every quantized type above. The quantizers reproduce ggml's reference quantizers
// (quantize_row_*_ref: what llama-quantize uses without an importance matrix), including the K-quants' iterative
// scale/min searches, so they produce the same bytes as llama.cpp (see quants_test.cpp for what is verified). The
// table formats' quantizers (IQ4_NL, IQ4_XS, MXFP4) are GRETA's own low-error searches (quants_lut_quantize.cpp);
// their decoders are ggml's exactly.
// Throws greta::Error naming the type for the others (Q8_1, Q8_K).
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
bool can_quantize(GgmlType type);

}  // namespace greta::model
