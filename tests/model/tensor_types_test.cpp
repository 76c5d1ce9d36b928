#include <doctest/doctest.h>

#include "model/tensor_types.h"

using namespace greta::model;

TEST_CASE("tensor type traits match ggml block sizes") {
  CHECK(traits(GgmlType::Q4_0).block_bytes == 18);
  CHECK(traits(GgmlType::Q6_K).block_bytes == 210);
  CHECK(row_bytes(GgmlType::Q4_K, 512) == 288);
  CHECK(type_from_name("Q4_K") == GgmlType::Q4_K);
  CHECK(type_from_name("bf16") == GgmlType::BF16);
  CHECK(!type_from_name("q7_z"));
  CHECK(traits(GgmlType::IQ4_NL).block_elems == 32);
  CHECK(traits(GgmlType::IQ4_NL).block_bytes == 18);
  CHECK(traits(GgmlType::IQ4_XS).block_elems == 256);
  CHECK(traits(GgmlType::IQ4_XS).block_bytes == 136);
  CHECK(traits(GgmlType::MXFP4).block_elems == 32);
  CHECK(traits(GgmlType::MXFP4).block_bytes == 17);
  CHECK(type_traits(20)->type == GgmlType::IQ4_NL);  // ggml's ids
  CHECK(type_traits(23)->type == GgmlType::IQ4_XS);
  CHECK(type_traits(39)->type == GgmlType::MXFP4);
  CHECK(type_from_name("IQ4_NL") == GgmlType::IQ4_NL);
  CHECK(type_from_name("iq4_xs") == GgmlType::IQ4_XS);
  CHECK(type_from_name("mxfp4") == GgmlType::MXFP4);
  CHECK(!type_traits(4).has_value());  // ids 4 and 5 (old Q4_2/Q4_3) were removed from ggml
}
