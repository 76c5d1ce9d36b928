// Table ("look-up") formats: IQ4_NL, IQ4_XS and MXFP4 (layouts and tables in quant_blocks.h). Each 4-bit code indexes
// a fixed table of 16 signed integers; a block (or sub-block) scale multiplies the table value. Decoders feed 32
// weights per block to a sink (see quants_internal.h) and compute every weight with ggml's expression and operand
// order (dequantize_row_iq4_nl / _iq4_xs / _mxfp4), so the values are bit-identical:
//   IQ4_NL  d * value                 (d: the block's fp16 scale)
//   IQ4_XS  (d * float(ls - 32)) * value
//   MXFP4   value * 2^(e - 128)       (exact: a small integer times a power of two)
#include "model/quant_blocks.h"
#include "model/quants_internal.h"

namespace greta::model::detail {

namespace {

// The 32 weights of one run of 16 code bytes (low nibbles first, as Q4_0's): scale * table[code]. IEEE products
// commute exactly, so this is also ggml's table[code] * scale for MXFP4.
template <class Table>
void decode_lut32(const uint8_t* qs, float scale, const Table& table, float* w) {
  for (int j = 0; j < 16; ++j) {
    w[j] = scale * float(table[qs[j] & 0x0F]);
    w[j + 16] = scale * float(table[qs[j] >> 4]);
  }
}

struct DecodeIQ4_NL {
  using Block = BlockIQ4_NL;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      float w[32];
      decode_lut32(b.qs, load_half(b.d), kIq4nlValues, w);
      sink.put32(i * 32, w);
    }
  }
};

struct DecodeIQ4_XS {
  using Block = BlockIQ4_XS;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      const float d = load_half(b.d);
      for (int s = 0; s < 8; ++s) {
        float w[32];
        decode_lut32(b.qs + 16 * s, d * float(unpack_scale_iq4_xs(b, s) - 32), kIq4nlValues, w);
        sink.put32(i * 256 + 32 * s, w);
      }
    }
  }
};

struct DecodeMXFP4 {
  using Block = BlockMXFP4;
  template <class Sink>
  static void decode(const Block* blocks, int64_t n_blocks, Sink& sink) {
    for (int64_t i = 0; i < n_blocks; ++i) {
      const Block& b = blocks[i];
      float w[32];
      decode_lut32(b.qs, e8m0_to_float_half(b.e), kMxfp4Values, w);
      sink.put32(i * 32, w);
    }
  }
};

}  // namespace

void dequantize_iq4_nl(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeIQ4_NL>(s, d, n); }
void dequantize_iq4_xs(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeIQ4_XS>(s, d, n); }
void dequantize_mxfp4(const void* s, float* d, int64_t n) { dequantize_blocks<DecodeMXFP4>(s, d, n); }
double dot_iq4_nl(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeIQ4_NL>(s, x, n); }
double dot_iq4_xs(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeIQ4_XS>(s, x, n); }
double dot_mxfp4(const void* s, const float* x, int64_t n) { return dot_blocks<DecodeMXFP4>(s, x, n); }

}  // namespace greta::model::detail
