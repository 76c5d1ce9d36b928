// GGML tensor types as stored in GGUF files: ids, block shapes and names. The numeric ids are ggml's (part of the
// file format); block layouts live in quants.h. A "block" is the unit of storage: block_elems weights packed into
// block_bytes bytes (1 element for F32/F16/BF16, 32 for the legacy quants, IQ4_NL and MXFP4, 256 for the K-quants and
// IQ4_XS).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace greta::model {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,
};

struct TypeTraits {
  GgmlType type;
  const char* name;     // ggml's spelling: "q4_K", "bf16", "iq4_nl", "mxfp4"
  uint32_t block_elems;  // weights per block
  uint32_t block_bytes;  // bytes per block
  bool supported;        // GRETA can dequantize it (reference dequantizer in quants.cpp)
};

// nullopt for ids GGUF defines but GRETA does not know (the caller names the id in its error).
std::optional<TypeTraits> type_traits(uint32_t raw_type);
const TypeTraits& traits(GgmlType type);
inline const char* type_name(GgmlType t) { return traits(t).name; }
// Case-insensitive: "q4_k", "Q4_K", "f16" ...
std::optional<GgmlType> type_from_name(std::string_view name);

// Bytes of one row of `n` elements; n must be a multiple of block_elems (checked by the caller, e.g. the GGUF reader).
inline uint64_t row_bytes(GgmlType t, uint64_t n) {
  const auto& tr = traits(t);
  return n / tr.block_elems * tr.block_bytes;
}

}  // namespace greta::model
