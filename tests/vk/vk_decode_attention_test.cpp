// Batched decode attention (AttentionOp::one_query_per_seq: one token of each of many sequences) and its output
// projection against the CPU reference: attention_decode's head-group layouts, and attention_decode_coopmat, which
// takes GQA steps over f16 caches on devices with f16 cooperative matrices (elsewhere attention_decode runs the same
// cases). Errors (NMSE) and their limits: vk_ops_compare.h.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "engine/op_case.h"
#include "engine/op_cases.h"
#include "engine/plan.h"
#include "vk_ops_compare.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::engine;
using model::GgmlType;
using namespace greta::vk::test;

// Batched decode steps (one token of each sequence: AttentionOp::one_query_per_seq) with their output projection,
// with 1, 2 and 4 query heads per workgroup forced (the backend takes 4 from 512 rows on): f32, f16 and q8_0 caches,
// groups of 2, 3, 4 and 8 query heads per KV head, head dims 16, 64 and 128, sliding windows, sinks, one split
// (positions < 32) and many. The last workgroup of a head group merges the splits of all its rows at once and also
// writes the projection's input: int8 for the int8 kernels (checked below), f16 where a cooperative-matrix GEMM
// reads it.
TEST_CASE("vk batched decode attention: head groups merged at once, with the output projection's inputs") {
  using engine::ElemType;
  struct Case {
    int64_t seqs, start, heads, kv_heads, head_dim, window;
    bool sinks;
    ElemType kv_type;
    GgmlType projection;
  };
  const Case cases[] = {
      {5, 300, 8, 2, 64, 0, false, ElemType::F16, GgmlType::Q4_0},
      {16, 450, 6, 2, 128, 0, true, ElemType::F16, GgmlType::F16},
      {9, 200, 32, 8, 128, 0, false, ElemType::F16, GgmlType::Q4_K},
      {3, 5, 16, 2, 64, 0, false, ElemType::F32, GgmlType::Q6_K},  // positions < 32: one split
      {7, 400, 8, 4, 16, 50, true, ElemType::Q8_0, GgmlType::F16},
      {33, 100, 8, 2, 128, 17, false, ElemType::F16, GgmlType::Q4_K},
      {20, 480, 12, 4, 64, 0, false, ElemType::F32, GgmlType::F16},
  };
  uint32_t seed = 1350;
  int multi_head_runs = 0, int8_out_runs = 0;
  for (const Case& k : cases)
    for (const char* heads : {"1", "2", "4"}) {
      CAPTURE(k.seqs);
      CAPTURE(k.heads);
      CAPTURE(k.kv_heads);
      CAPTURE(k.head_dim);
      CAPTURE(int(k.kv_type));
      CAPTURE(heads);
      vk::test::ScopedEnv heads_env("GRETA_VK_ATTN_HEADS", heads);
      test::AttentionShape s{k.seqs, k.start, k.heads, k.kv_heads, k.head_dim, k.seqs, k.kv_type};
      s.window = k.window;
      s.sinks = k.sinks;
      s.decode = true;
      const std::string kernels = check_decode_step(s, k.projection, seed);
      CHECK_MESSAGE(has(kernels, "attention_decode_f32"), kernels);
      // More than one head where the group allows (small subgroups may take 2 for 4, and 1 for head dim 128).
      if (heads[0] != '1' && (k.heads / k.kv_heads) % std::atoi(heads) == 0 && k.head_dim <= 64)
        CHECK_MESSAGE(!has(kernels, "(1 head,"), kernels);
      multi_head_runs += !has(kernels, "(1 head,");
      if (k.head_dim % 32 == 0) CHECK_MESSAGE(has(kernels, "int8 output"), kernels);
      int8_out_runs += has(kernels, "int8 output");
      if (k.window > 0) CHECK_MESSAGE(has(kernels, "window"), kernels);
      if (k.sinks) CHECK_MESSAGE(has(kernels, "sinks"), kernels);
    }
  CHECK(multi_head_runs >= 6);
  CHECK(int8_out_runs >= 10);
}

// attention_decode_coopmat: the query heads of a KV head as the columns of one tile. Groups of 2, 3, 4 and 8 query
// heads per KV head (8: one workgroup on 8 columns, two of 4 on 16), head dims 16, 32, 64 and 128 (96 takes
// attention_decode), sliding windows (blocks cut at the front and the back), sinks, one split (positions < 32) and
// many, sequences at position 0 and near the context's end; the output as int8, f16 and f32 for the projections.
// Each case runs with GRETA_VK_ATTN_COOPMAT=1 (the kernel at any number of sequences, on its tile of 8 head columns
// where the device has 16x8x16 products), =16 (the same on its 16-column tile) and =0 (attention_decode); unset, the
// backend takes it from 128 head groups (the rule's two cases last). Without cooperative matrices (lavapipe) =1 runs
// attention_decode as =0 does, so only the first case checks that fallback.
TEST_CASE("vk batched decode attention on cooperative matrices: GQA head groups as the rows of a tile") {
  struct Case {
    int64_t seqs, start, heads, kv_heads, head_dim, window;
    bool sinks;
    GgmlType projection;
  };
  const Case cases[] = {
      {5, 300, 8, 2, 64, 0, false, GgmlType::Q4_0},   {16, 450, 32, 8, 128, 0, true, GgmlType::F16},
      {9, 200, 12, 4, 64, 0, false, GgmlType::Q4_K},  {3, 5, 16, 2, 64, 0, false, GgmlType::Q6_K},
      {7, 400, 8, 4, 16, 50, true, GgmlType::F16},    {33, 100, 8, 2, 128, 17, false, GgmlType::Q4_K},
      {20, 481, 4, 2, 32, 0, true, GgmlType::F16},    {2, 0, 8, 2, 64, 0, false, GgmlType::Q4_0},
      {17, 300, 32, 4, 128, 0, true, GgmlType::Q4_K},  // groups of 8: one workgroup of 8 heads on 8 columns
      {6, 300, 8, 2, 96, 0, false, GgmlType::Q4_0},  // head dim 96: attention_decode
  };
  const bool coopmat = device_has_coopmat();
  uint32_t seed = 1380;
  int coopmat_runs = 0, narrow_runs = 0;
  for (const Case& k : cases)
    for (const char* env : {"1", "16", "0"}) {
      if (!coopmat && env[0] == '1' && &k != &cases[0]) continue;
      CAPTURE(k.seqs);
      CAPTURE(k.start);
      CAPTURE(k.heads);
      CAPTURE(k.kv_heads);
      CAPTURE(k.head_dim);
      CAPTURE(k.window);
      CAPTURE(env);
      vk::test::ScopedEnv coopmat_env("GRETA_VK_ATTN_COOPMAT", env);
      test::AttentionShape s{k.seqs, k.start, k.heads, k.kv_heads, k.head_dim, k.seqs, engine::ElemType::F16};
      s.window = k.window;
      s.sinks = k.sinks;
      s.decode = true;
      const std::string kernels = check_decode_step(s, k.projection, seed);
      const bool ran = has(kernels, "attention_decode_coopmat");
      CHECK_MESSAGE(ran == (coopmat && env[0] == '1' && k.head_dim != 96), kernels);
      coopmat_runs += ran;
      if (ran && env[1] == '6') CHECK_MESSAGE(!has(kernels, "coopmat_n8"), kernels);
      const bool narrow = has(kernels, "coopmat_n8");
      narrow_runs += narrow;
      // Groups of 8 take one workgroup of 8 heads on the 8-column tile, two of 4 on the 16-column one.
      if (ran && (k.heads / k.kv_heads) % 8 == 0)
        CHECK_MESSAGE(has(kernels, narrow ? "(8 heads" : "(4 heads"), kernels);
      if (k.head_dim % 32 == 0) CHECK_MESSAGE(has(kernels, "int8 output"), kernels);
      if (k.window > 0) CHECK_MESSAGE(has(kernels, "window"), kernels);
      if (k.sinks) CHECK_MESSAGE(has(kernels, "sinks"), kernels);
    }
  if (coopmat) CHECK(coopmat_runs == 18);
  MESSAGE("attention_decode_coopmat on 8 head columns in ", narrow_runs, " of ", coopmat_runs, " runs");
  CHECK((narrow_runs == 0 || narrow_runs == 9));  // where the device has 16x8x16 products, in every =1 run
  // The rule: 16 sequences of 32 query heads on 8 KV heads are 128 head groups of 4 (the coopmat kernel, in splits
  // for about 256 workgroups), 8 are 64 (attention_decode).
  for (int64_t seqs : {int64_t(8), int64_t(16)}) {
    CAPTURE(seqs);
    test::AttentionShape s{seqs, 450, 32, 8, 128, seqs, engine::ElemType::F16};
    s.decode = true;
    const std::string kernels = check_decode_step(s, GgmlType::Q4_0, seed);
    CHECK_MESSAGE(has(kernels, "attention_decode_coopmat") == (coopmat && seqs == 16), kernels);
  }
}
