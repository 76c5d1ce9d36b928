// Public codec entry points: argument checks, per-type dispatch, and the unquantized float formats (F32, F16, BF16).
// The quantized formats live in quants_legacy.cpp (32-weight blocks), quants_k.cpp (K-quant decoders),
// quants_k_quantize.cpp (K-quant quantizers) and quants_lut*.cpp (the table formats IQ4_NL, IQ4_XS, MXFP4); see quants_internal.h for the decoder/sink design.
#include "model/quants.h"

#include <cstring>

#include "core/error.h"
#include "model/quants_internal.h"

namespace greta::model {

namespace {

using namespace detail;

// F16 / BF16 rows: full runs of 32 through the sink (vectorizable), the n % 32 tail element by element.
template <float (*Load)(const uint8_t*)>
struct DecodeHalfRun {
  struct Block {
    uint8_t h[64];
  };
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_runs, Sink& sink) {
    for (int64_t i = 0; i < n_runs; ++i) {
      float w[32];
      for (int l = 0; l < 32; ++l) w[l] = Load(blocks[i].h + 2 * l);
      sink.put32(i * 32, w);
    }
  }
};

float load_bf16(const uint8_t* p) { return bf16_to_fp32(load_u16(p)); }

template <float (*Load)(const uint8_t*)>
void dequantize_half_row(const void* src, float* dst, int64_t n) {
  const int64_t runs = n / 32;
  dequantize_blocks<DecodeHalfRun<Load>>(src, dst, runs);
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = runs * 32; i < n; ++i) dst[i] = Load(bytes + 2 * i);
}

template <float (*Load)(const uint8_t*)>
double dot_half_row(const void* src, const float* x, int64_t n) {
  const int64_t runs = n / 32;
  double sum = dot_blocks<DecodeHalfRun<Load>>(src, x, runs);
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = runs * 32; i < n; ++i) sum += double(Load(bytes + 2 * i)) * x[i];
  return sum;
}

struct DecodeF32Run {
  struct Block {  // bytes, so rows at any address are fine
    uint8_t bytes[128];
  };
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_runs, Sink& sink) {
    for (int64_t i = 0; i < n_runs; ++i) {
      float w[32];
      std::memcpy(w, blocks[i].bytes, sizeof w);
      sink.put32(i * 32, w);
    }
  }
};

double dot_f32_row(const void* src, const float* x, int64_t n) {
  const int64_t runs = n / 32;
  double sum = dot_blocks<DecodeF32Run>(src, x, runs);
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = runs * 32; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    sum += double(v) * x[i];
  }
  return sum;
}

// Validates (type, n) for a row operation and returns the number of blocks. `what` names the operation.
int64_t checked_blocks(const char* what, GgmlType type, int64_t n) {
  const auto tr = type_traits(static_cast<uint32_t>(type));
  if (!tr) fail(what, ": unknown tensor type id ", static_cast<uint32_t>(type));
  if (!tr->supported) fail(what, ": tensor type ", tr->name, " is not supported");
  if (n < 0) fail(what, ": negative row length ", n, " for ", tr->name);
  if (n % tr->block_elems != 0)
    fail(what, ": ", tr->name, " row length ", n, " is not a multiple of its block size ", tr->block_elems);
  return n / tr->block_elems;
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = checked_blocks("dequantize_row", type, n);
  if (n == 0) return;
  GRETA_CHECK(src != nullptr && dst != nullptr);
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16: dequantize_half_row<load_half>(src, dst, n); return;
    case GgmlType::BF16: dequantize_half_row<load_bf16>(src, dst, n); return;
    case GgmlType::Q4_0: dequantize_q4_0(src, dst, nb); return;
    case GgmlType::Q4_1: dequantize_q4_1(src, dst, nb); return;
    case GgmlType::Q5_0: dequantize_q5_0(src, dst, nb); return;
    case GgmlType::Q5_1: dequantize_q5_1(src, dst, nb); return;
    case GgmlType::Q8_0: dequantize_q8_0(src, dst, nb); return;
    case GgmlType::Q2_K: dequantize_q2_k(src, dst, nb); return;
    case GgmlType::Q3_K: dequantize_q3_k(src, dst, nb); return;
    case GgmlType::Q4_K: dequantize_q4_k(src, dst, nb); return;
    case GgmlType::Q5_K: dequantize_q5_k(src, dst, nb); return;
    case GgmlType::Q6_K: dequantize_q6_k(src, dst, nb); return;
    case GgmlType::IQ4_NL: dequantize_iq4_nl(src, dst, nb); return;
    case GgmlType::IQ4_XS: dequantize_iq4_xs(src, dst, nb); return;
    case GgmlType::MXFP4: dequantize_mxfp4(src, dst, nb); return;
    default: break;
  }
  fail("dequantize_row: no decoder for tensor type ", type_name(type));
}

float dot_row(GgmlType type, const void* row, const float* x, int64_t n) {
  const int64_t nb = checked_blocks("dot_row", type, n);
  if (n == 0) return 0.f;
  GRETA_CHECK(row != nullptr && x != nullptr);
  double sum = 0;
  switch (type) {
    case GgmlType::F32: sum = dot_f32_row(row, x, n); break;
    case GgmlType::F16: sum = dot_half_row<load_half>(row, x, n); break;
    case GgmlType::BF16: sum = dot_half_row<load_bf16>(row, x, n); break;
    case GgmlType::Q4_0: sum = dot_q4_0(row, x, nb); break;
    case GgmlType::Q4_1: sum = dot_q4_1(row, x, nb); break;
    case GgmlType::Q5_0: sum = dot_q5_0(row, x, nb); break;
    case GgmlType::Q5_1: sum = dot_q5_1(row, x, nb); break;
    case GgmlType::Q8_0: sum = dot_q8_0(row, x, nb); break;
    case GgmlType::Q2_K: sum = dot_q2_k(row, x, nb); break;
    case GgmlType::Q3_K: sum = dot_q3_k(row, x, nb); break;
    case GgmlType::Q4_K: sum = dot_q4_k(row, x, nb); break;
    case GgmlType::Q5_K: sum = dot_q5_k(row, x, nb); break;
    case GgmlType::Q6_K: sum = dot_q6_k(row, x, nb); break;
    case GgmlType::IQ4_NL: sum = dot_iq4_nl(row, x, nb); break;
    case GgmlType::IQ4_XS: sum = dot_iq4_xs(row, x, nb); break;
    case GgmlType::MXFP4: sum = dot_mxfp4(row, x, nb); break;
    default: fail("dot_row: no decoder for tensor type ", type_name(type));
  }
  return float(sum);
}

bool can_quantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::MXFP4: return true;
    default: return false;
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  const int64_t nb = checked_blocks("quantize_row", type, n);
  if (!can_quantize(type)) fail("quantize_row: no quantizer for tensor type ", type_name(type));
  if (n == 0) return;
  GRETA_CHECK(src != nullptr && dst != nullptr);
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(out + 2 * i, fp32_to_fp16(src[i]));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(out + 2 * i, fp32_to_bf16(src[i]));
      return;
    case GgmlType::Q4_0: quantize_q4_0(src, dst, nb); return;
    case GgmlType::Q4_1: quantize_q4_1(src, dst, nb); return;
    case GgmlType::Q5_0: quantize_q5_0(src, dst, nb); return;
    case GgmlType::Q5_1: quantize_q5_1(src, dst, nb); return;
    case GgmlType::Q8_0: quantize_q8_0(src, dst, nb); return;
    case GgmlType::Q2_K: quantize_q2_k(src, dst, nb); return;
    case GgmlType::Q3_K: quantize_q3_k(src, dst, nb); return;
    case GgmlType::Q4_K: quantize_q4_k(src, dst, nb); return;
    case GgmlType::Q5_K: quantize_q5_k(src, dst, nb); return;
    case GgmlType::Q6_K: quantize_q6_k(src, dst, nb); return;
    case GgmlType::IQ4_NL: quantize_iq4_nl(src, dst, nb); return;
    case GgmlType::IQ4_XS: quantize_iq4_xs(src, dst, nb); return;
    case GgmlType::MXFP4: quantize_mxfp4(src, dst, nb); return;
    default: break;
  }
  fail("quantize_row: no quantizer for tensor type ", type_name(type));
}

}  // namespace greta::model
