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
  CHECK(!type_traits(4).has_value());  // ids 4 and 5 (old Q4_2/Q4_3) were removed from ggml
}
