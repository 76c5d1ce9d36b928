#include "model/tensor_types.h"

#include <cctype>

#include "core/error.h"

namespace greta::model {

namespace {
// Block sizes from ggml's block structs (QK4_0 = QK8_0 = QK4_NL = QK_MXFP4 = 32, QK_K = 256).
constexpr TypeTraits k_traits[] = {
    {GgmlType::F32, "f32", 1, 4, true},
    {GgmlType::F16, "f16", 1, 2, true},
    {GgmlType::BF16, "bf16", 1, 2, true},
    {GgmlType::Q4_0, "q4_0", 32, 18, true},   // f16 d; 16 bytes of nibbles
    {GgmlType::Q4_1, "q4_1", 32, 20, true},   // f16 d, m; 16 bytes of nibbles
    {GgmlType::Q5_0, "q5_0", 32, 22, true},   // f16 d; 4 bytes of high bits; 16 bytes of nibbles
    {GgmlType::Q5_1, "q5_1", 32, 24, true},   // f16 d, m; 4 bytes high bits; 16 bytes nibbles
    {GgmlType::Q8_0, "q8_0", 32, 34, true},   // f16 d; 32 int8
    {GgmlType::Q8_1, "q8_1", 32, 36, false},  // f16 d, s; 32 int8 (activation type, never a weight here)
    {GgmlType::Q2_K, "q2_K", 256, 84, true},  // 16 scales; 64 quants; f16 d, dmin
    {GgmlType::Q3_K, "q3_K", 256, 110, true}, // 32 hmask; 64 quants; 12 scales; f16 d
    {GgmlType::Q4_K, "q4_K", 256, 144, true}, // f16 d, dmin; 12 scales; 128 quants
    {GgmlType::Q5_K, "q5_K", 256, 176, true}, // f16 d, dmin; 12 scales; 32 qh; 128 qs
    {GgmlType::Q6_K, "q6_K", 256, 210, true}, // 128 ql; 64 qh; 16 int8 scales; f16 d
    {GgmlType::Q8_K, "q8_K", 256, 292, false},// f32 d; 256 int8; 16 int16 bsums (activation type)
    {GgmlType::IQ4_NL, "iq4_nl", 32, 18, true},  // f16 d; 16 bytes of 4-bit indices into a 16-value table
    {GgmlType::IQ4_XS, "iq4_xs", 256, 136, true},// f16 d; u16 scales_h; 4 scales_l; 128 bytes of indices
    {GgmlType::MXFP4, "mxfp4", 32, 17, true},    // e8m0 exponent; 16 bytes of 4-bit e2m1 codes
};
}  // namespace

std::optional<TypeTraits> type_traits(uint32_t raw_type) {
  for (const auto& t : k_traits)
    if (static_cast<uint32_t>(t.type) == raw_type) return t;
  return std::nullopt;
}

const TypeTraits& traits(GgmlType type) {
  for (const auto& t : k_traits)
    if (t.type == type) return t;
  fail("unknown tensor type id ", static_cast<uint32_t>(type));
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const auto& t : k_traits) {
    std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size() && eq; ++i)
      eq = std::tolower(static_cast<unsigned char>(n[i])) == std::tolower(static_cast<unsigned char>(name[i]));
    if (eq) return t.type;
  }
  return std::nullopt;
}

}  // namespace greta::model
