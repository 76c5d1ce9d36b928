// The Vulkan backend over the paged KV cache (engine/plan.h): attention of several sequences in one step (prefill
// chunks, decode tokens, both mixed, padding) on scrambled pages, F16 caches, the rope_kv fusion's paged f16 writes,
// GatherRows, and the persistent KV buffers growing with their contents kept. Every op against the CPU reference
// backend, which implements the same contract (and also stores F16 caches as f16, so f16 cases compare as tightly
// as f32 ones: both compute in f32 from the same halves). Q8_0 caches likewise: both backends quantize the same f32
// rows the same way (engine/kv_q8.h; kv_write_q8 on the device, kv_q8_quantize on the CPU) and dequantize d * q in
// f32, so the attention outputs differ only by the reduction order, as with f32 caches.
//   attention (f32 reductions in another order)                1e-9; 2e-6 where the cooperative-matrix kernel ran
//   cache contents (kv_write, rope_kv)                         1e-12 f32; 1e-10 f16 (a device may flush f16
//                                                              subnormals when it converts); 1e-10 q8_0 (a device
//                                                              whose division is not correctly rounded may get a
//                                                              scale 1 ulp off, or round an int8 tie the other way)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/half.h"
#include "cpu/cpu_backend.h"
#include "engine/backend.h"
#include "engine/kv_q8.h"
#include "engine/op_case.h"
#include "engine/op_cases.h"
#include "engine/plan.h"
#include "test_util.h"
#include "vk/backend/vk_backend.h"
#include "vk_shared_device.h"

using namespace greta;
using namespace greta::engine;

namespace {

bool has(const std::string& kernels, const char* what) { return kernels.find(what) != std::string::npos; }

// Runs `c` on the CPU and on Vulkan, checks the NMSE of `out`'s elements [first, first + count) (count < 0: to the
// end) against `limit` (2e-6 when a cooperative-matrix kernel ran) and the validation log; returns the kernel list.
std::string compare(OpCase& c, BufferId out, double limit, int64_t first = 0, int64_t count = -1) {
  cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
  const auto want = c.run_once(cpu, out);
  auto vk = vk::test::test_backend();
  auto prepared = c.load_and_prepare(*vk);
  c.run(*vk, *prepared);
  const auto got = c.read(*vk, *prepared, out);
  const std::string kernels = vk::describe_kernels(*prepared);
  if (has(kernels, "coopmat")) limit = std::max(limit, 2e-6);
  REQUIRE(got.size() == want.size());
  if (count < 0) count = int64_t(got.size()) - first;
  REQUIRE((first >= 0 && first + count <= int64_t(got.size())));
  const double e = test::nmse(got.data() + first, want.data() + first, size_t(count));
  CHECK_MESSAGE(e <= limit, "NMSE ", e, " > ", limit, " with ", kernels);
  CHECK(vk::validation_messages(*vk).empty());
  return kernels;
}

// OpCase::input takes F32 and F16 buffers: Q8_0 caches are built as F32 ones (the same random values) and retyped
// here, before anything is prepared; both backends then quantize those values on write (engine/kv_q8.h).
void retype_caches(OpCase& c, ElemType type) {
  for (BufferDecl& b : c.plan.buffers)
    if (b.name == "k_cache" || b.name == "v_cache") b.type = type;
}

double cache_limit(ElemType type) { return type == ElemType::F32 ? 1e-12 : 1e-10; }

// Padding tokens all write KV row 0 (the sink page) in any order, and their outputs are meaningless: a padded step is
// compared on its real tokens' outputs (they come first) and on the cache past page 0. Returns the kernel list.
std::string compare_padded(test::AttentionCase& a, int64_t padding, ElemType kv_type) {
  const auto& op = std::get<AttentionOp>(a.c.plan.ops.back().op);
  const int64_t row = op.n_heads * op.head_dim_v, kv_width = op.n_kv_heads * op.head_dim;
  const std::string kernels = compare(a.c, a.out, 1e-9, 0, (op.n_tokens - padding) * row);
  compare(a.c, a.k_cache, cache_limit(kv_type), op.page_size * kv_width);
  return kernels;
}

// A step of sequences with `lens` tokens at positions starts[i].. (then `padding` padding tokens) on scrambled pages
// of a pool for n_seqs + 1 sequences of `ctx` positions: this step's K and V written into caches of random rows, then
// attention. Unlike test::attention_case (equal shares), any mix: prefill chunks beside decode tokens.
test::AttentionCase mixed_attention_case(const std::vector<int64_t>& lens, const std::vector<int64_t>& starts,
                                         int64_t padding, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                         ElemType kv_type, uint32_t& seed, int64_t ctx = 512) {
  int64_t n = padding;
  for (int64_t l : lens) n += l;
  OpCase c(n, ctx, int64_t(lens.size()) + 1);
  c.sequences(lens, starts, seed++);
  const KvLayout& kv = c.plan.shape.kv;
  const int64_t rows = kv.cache_rows(), kv_width = kv_heads * head_dim;
  const BufferId q = c.input("q", n * heads * head_dim, seed++);
  const BufferId k = c.input("k", n * kv_width, seed++);
  const BufferId v = c.input("v", n * kv_width, seed++);
  const ElemType input_type = kv_type == ElemType::Q8_0 ? ElemType::F32 : kv_type;  // retyped below
  const BufferId k_cache = c.input("k_cache", rows * kv_width, seed++, 1.f, input_type);
  const BufferId v_cache = c.input("v_cache", rows * kv_width, seed++, 1.f, input_type);
  retype_caches(c, kv_type);
  const BufferId out = c.output("attn", n * heads * head_dim);
  c.add("k write", KvWriteOp{k, k_cache, c.kv_rows, n, kv_width, rows});
  c.add("v write", KvWriteOp{v, v_cache, c.kv_rows, n, kv_width, rows});
  c.add("attention", AttentionOp{q, k_cache, v_cache, c.plan.positions, c.seq, c.page_table, out, n, heads, kv_heads,
                                 head_dim, head_dim, c.plan.shape.n_seqs, kv.page_size, kv.pages_per_seq, rows,
                                 1.f / std::sqrt(float(head_dim))});
  return {std::move(c), out, k_cache};
}

}  // namespace

TEST_CASE("vk paged attention: several sequences per step, prefill and decode, padding, f32, f16 and q8_0 caches") {
  // {n_tokens, start_pos, heads, kv_heads, head_dim, n_seqs, kv_type, padding}: prefill chunks of 2, 3 and 5
  // sequences (>= 16 tokens: the cooperative-matrix kernel where the device has it), decode steps of one token per
  // sequence (<= 4 tokens: the split-key kernels, attention_decode for head dims that are multiples of 4,
  // attention_f32 for 18; 8 and 16 tokens: attention_f32 unsplit), and padded steps.
  const test::AttentionShape shapes[] = {
      {40, 10, 4, 2, 64, 2},       {48, 100, 8, 2, 128, 3},    {37, 0, 4, 1, 64, 5},      {70, 200, 2, 1, 80, 3},
      {3, 200, 8, 2, 64, 3},       {4, 300, 4, 4, 40, 4},      {2, 150, 4, 2, 18, 2},     {8, 450, 8, 2, 64, 8},
      {16, 60, 4, 2, 128, 16},     {20, 5, 4, 2, 64, 2, ElemType::F32, 3},  {4, 100, 4, 2, 64, 2, ElemType::F32, 2},
      {2, 480, 8, 8, 128, 1, ElemType::F32, 1},
      {2, 150, 16, 16, 18, 2}, {20, 40, 16, 16, 18, 2}};  // (kv_type is set below)
  uint32_t seed = 2000;
  int decode_kernel_cases = 0, q8_decode_kernel_cases = 0;
  for (ElemType kv_type : {ElemType::F32, ElemType::F16, ElemType::Q8_0})
    for (test::AttentionShape s : shapes) {
      const bool q8 = kv_type == ElemType::Q8_0, head_dim_18_q8 = s.head_dim == 18 && s.kv_heads == 16;
      // Q8_0 cache rows are whole blocks of 32 (n_kv_heads * head_dim % 32 == 0); the two head-dim-18 shapes with
      // 16 KV heads (rows of 9 blocks, blocks across heads, unaligned vec4s: attention_f32's scalar reads) are for
      // Q8_0 only. Head dim 40 over 4 KV heads puts block boundaries inside heads.
      if (q8 ? s.kv_heads * s.head_dim % 32 != 0 : head_dim_18_q8) continue;
      s.kv_type = q8 ? ElemType::F32 : kv_type;
      const std::string type = elem_type_name(kv_type);
      CAPTURE(type);
      CAPTURE(s.n_tokens);
      CAPTURE(s.start_pos);
      CAPTURE(s.head_dim);
      CAPTURE(s.n_seqs);
      CAPTURE(s.padding);
      test::AttentionCase a = test::attention_case(s, seed);
      if (q8) retype_caches(a.c, kv_type);
      const std::string kernels = compare_padded(a, s.padding, kv_type);
      CHECK_MESSAGE(has(kernels, q8                           ? "kv_write_q8"
                                 : kv_type == ElemType::F16 ? "kv_write_f16"
                                                            : "kv_write_f32"),
                    kernels);
      if (kv_type == ElemType::F16) CHECK_MESSAGE(has(kernels, "_kvf16"), kernels);
      if (q8) CHECK_MESSAGE(has(kernels, "_kvq8"), kernels);
      if (has(kernels, "attention_decode")) ++(q8 ? q8_decode_kernel_cases : decode_kernel_cases);
    }
  CHECK(decode_kernel_cases >= 6);
  CHECK(q8_decode_kernel_cases >= 3);
}

TEST_CASE("vk paged attention: prefill chunks and decode tokens of different sequences mixed in one step") {
  struct Mix {
    std::vector<int64_t> lens, starts;
    int64_t padding, head_dim;
  };
  const Mix mixes[] = {
      {{20, 1, 1, 13}, {0, 300, 77, 40}, 0, 64},   // prefill, two decodes, a chunk continuing at 40
      {{1, 30, 1}, {511, 100, 5}, 2, 128},         // decode at the last position, a chunk, a decode; padded
      {{1, 1, 1}, {31, 32, 33}, 1, 64},            // decodes on page boundaries, padded (4 tokens: split keys)
      {{17, 16}, {15, 480}, 0, 96},                // chunks straddling pages
      {{5, 64, 2}, {0, 64, 200}, 5, 32},           // the middle one spans several workgroup tiles
  };
  uint32_t seed = 2100;
  for (ElemType kv_type : {ElemType::F32, ElemType::F16, ElemType::Q8_0})
    for (const Mix& m : mixes) {  // (2 KV heads of head dims multiples of 16: whole q8_0 blocks per row)
      const std::string type = elem_type_name(kv_type);
      CAPTURE(type);
      CAPTURE(m.lens.size());
      CAPTURE(m.padding);
      CAPTURE(m.head_dim);
      test::AttentionCase a = mixed_attention_case(m.lens, m.starts, m.padding, 4, 2, m.head_dim, kv_type, seed);
      compare_padded(a, m.padding, kv_type);
    }
}

// Decode attention in a plan for a long context (4096 positions per sequence, as a server's) sizes its key splits for
// each step's longest sequence (OpEncoder::step_split_groups): steps of 4 sequences, one token each, whose longest
// is 40, 700, 4000 and again 100 positions, one after another on the same prepared plan (the split size a kernel
// reads must be the step's: a stale one from a shorter step misses keys), each against the CPU.
TEST_CASE("vk paged attention: decode key splits sized for each step's longest sequence") {
  uint32_t seed = 2300;
  const std::vector<int64_t> lens = {1, 1, 1, 1};
  const std::vector<std::vector<int64_t>> steps = {{39, 3, 17, 0}, {699, 5, 300, 64}, {3999, 10, 2047, 128},
                                                   {99, 4000, 31, 2}};
  for (ElemType kv_type : {ElemType::F32, ElemType::F16}) {
    const std::string type = elem_type_name(kv_type);
    CAPTURE(type);
    test::AttentionCase a = mixed_attention_case(lens, steps[0], 0, 8, 2, 64, kv_type, seed, 4096);
    cpu::CpuBackend cpu(cpu::CpuOptions{.threads = 2});
    auto vk = vk::test::test_backend();
    auto cpu_plan = a.c.load_and_prepare(cpu);
    auto vk_plan = a.c.load_and_prepare(*vk);
    const std::string kernels = vk::describe_kernels(*vk_plan);
    CHECK_MESSAGE(has(kernels, "sized for each step's longest sequence"), kernels);
    for (const auto& starts : steps) {
      CAPTURE(starts[0]);
      CAPTURE(starts[1]);
      a.c.sequences(lens, starts, seed++);
      a.c.run(cpu, *cpu_plan);
      a.c.run(*vk, *vk_plan);
      const auto want = a.c.read(cpu, *cpu_plan, a.out), got = a.c.read(*vk, *vk_plan, a.out);
      REQUIRE(got.size() == want.size());
      const double e = test::nmse(got.data(), want.data(), got.size());
      CHECK_MESSAGE(e <= 1e-9, "NMSE ", e, " with ", kernels);
    }
    CHECK(vk::validation_messages(*vk).empty());
  }
}

TEST_CASE("vk gather rows: the logit rows of a step, in any order, repeated") {
  uint32_t seed = 2300;
  for (int64_t width : {int64_t(5), int64_t(1000)}) {
    CAPTURE(width);
    const int64_t n = 7;
    OpCase c(n, 8);
    const BufferId x = c.input("x", n * width, seed++);
    const std::vector<int32_t> rows = {6, 0, 3, 3};
    const BufferId logit_rows = c.plan.add_buffer("logit_rows", ElemType::I32, BufferRole::LogitRows, 4);
    const BufferId out = c.output("gathered", int64_t(rows.size()) * width);
    c.add("gather", GatherRowsOp{x, logit_rows, out, int64_t(rows.size()), width});
    StepArrays step = single_sequence_step(c.plan, c.tokens, 0);
    step.logit_rows = rows;
    c.step = step;
    const std::string kernels = compare(c, out, 0.0);
    CHECK_MESSAGE(has(kernels, "gather_rows_f32"), kernels);
  }
}

// The engine grows its page pool by preparing plans whose persistent caches are larger: the backend moves each to a
// larger buffer with the old rows in front (the rest zeros), shared with the plans prepared from then on.
TEST_CASE("vk persistent buffers grow with their contents kept") {
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::Q8_0}) {
    const std::string type_name = elem_type_name(type);
    CAPTURE(type_name);
    const int64_t width = type == ElemType::Q8_0 ? 64 : 6, n = 2;  // q8_0: rows of whole blocks
    uint32_t seed = 2400;
    // A two-token K write at start_pos into the persistent "blk.0.k_cache" of a pool for ctx positions.
    struct Case {
      OpCase c;
      BufferId src, cache;
    };
    const auto make = [&](int64_t ctx, int64_t start_pos) {
      OpCase c(n, ctx);
      c.start_pos = start_pos;
      const int64_t rows = c.plan.shape.kv.cache_rows();
      const BufferId src = c.input("k", n * width, seed++);
      const BufferId cache = c.plan.add_buffer("blk.0.k_cache", type, BufferRole::Persistent, rows * width);
      c.add("k_cache", KvWriteOp{src, cache, c.kv_rows, n, width, rows});
      return Case{std::move(c), src, cache};
    };
    // The values the cache holds for src's n rows: converted to f16, or quantized per block of 32 (engine/kv_q8.h).
    const auto stored = [&](const std::vector<float>& src) {
      std::vector<float> v(src);
      if (type == ElemType::F16)
        for (float& x : v) x = fp16_to_fp32(fp32_to_fp16(x));
      if (type == ElemType::Q8_0) {
        std::vector<uint32_t> blocks(size_t(kv_q8_bytes(int64_t(v.size())) / 4));
        kv_q8_quantize(src.data(), blocks.data(), int64_t(v.size()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = kv_q8_value(blocks.data(), int64_t(i));
      }
      return v;
    };
    auto vk = vk::test::test_backend();
    Case small = make(64, 40);  // 3 pages of 32 rows; positions 40, 41 on page 2: rows 72, 73
    auto small_plan = small.c.load_and_prepare(*vk);
    small.c.run(*vk, *small_plan);
    const std::vector<float> before = small.c.read(*vk, *small_plan, small.cache);
    REQUIRE(before.size() == size_t(96 * width));
    const std::vector<float> small_rows = stored(small.c.inputs.at(small.src));
    for (int64_t i = 0; i < n * width; ++i) CHECK(before[size_t(72 * width + i)] == small_rows[size_t(i)]);

    Case large = make(256, 200);  // 9 pages: 288 rows; positions 200, 201 on page 7: rows 232, 233
    auto large_plan = large.c.load_and_prepare(*vk);
    std::vector<float> grown = large.c.read(*vk, *large_plan, large.cache);
    REQUIRE(grown.size() == size_t(288 * width));
    for (size_t i = 0; i < grown.size(); ++i) {
      const float want = i < before.size() ? before[i] : 0.f;
      if (grown[i] != want) {
        CHECK_MESSAGE(grown[i] == want, "element ", i, " of the grown cache");
        break;
      }
    }
    large.c.run(*vk, *large_plan);
    grown = large.c.read(*vk, *large_plan, large.cache);
    const std::vector<float> large_rows = stored(large.c.inputs.at(large.src));
    for (int64_t i = 0; i < n * width; ++i) {
      CHECK(grown[size_t(72 * width + i)] == before[size_t(72 * width + i)]);
      CHECK(grown[size_t(232 * width + i)] == large_rows[size_t(i)]);
    }
    // A plan declaring the old size afterwards (not what the engine does) shares the larger buffer.
    Case again = make(64, 0);
    auto again_plan = again.c.load_and_prepare(*vk);
    const std::vector<float> front = again.c.read(*vk, *again_plan, again.cache);
    REQUIRE(front.size() == size_t(96 * width));
    CHECK(std::equal(front.begin(), front.end(), grown.begin()));
    CHECK(vk::validation_messages(*vk).empty());
  }
}

// Q8_0 buffers (KV caches, engine/kv_q8.h) are read and written as floats in whole blocks of 32: write quantizes on
// the host, read dequantizes; ranges that split a block are refused.
TEST_CASE("vk q8_0 buffers: read and write whole blocks") {
  uint32_t seed = 2500;
  OpCase c(1, 32);
  const int64_t rows = c.plan.shape.kv.cache_rows(), width = 64;
  const BufferId src = c.input("k", width, seed++);
  const BufferId cache = c.input("k_cache", rows * width, seed++);
  retype_caches(c, ElemType::Q8_0);
  c.add("k write", KvWriteOp{src, cache, c.kv_rows, 1, width, rows});
  auto vk = vk::test::test_backend();
  auto prepared = c.load_and_prepare(*vk);
  const std::vector<float> values = test::random_floats(96, seed++, -3.f, 3.f);
  vk->write(*prepared, cache, 32, values);
  std::vector<float> got(128);
  vk->read(*prepared, cache, 0, got);
  std::vector<uint32_t> blocks(size_t(kv_q8_bytes(96) / 4));
  kv_q8_quantize(values.data(), blocks.data(), 96);
  for (int64_t i = 0; i < 96; ++i) CHECK(got[size_t(32 + i)] == kv_q8_value(blocks.data(), i));
  std::vector<float> part(32);
  CHECK_THROWS(vk->read(*prepared, cache, 16, part));
  CHECK_THROWS(vk->write(*prepared, cache, 0, std::span<const float>(values.data(), 40)));
  CHECK(vk::validation_messages(*vk).empty());
}
