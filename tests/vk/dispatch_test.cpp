// The fill / copy / add shaders against the CPU on random data, both descriptor paths, specialization constants,
// subgroup size control and dispatch argument checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;

namespace {

struct CountValue {
  uint32_t count;
  uint32_t value;
};

void check_fill(VkFixture& f, uint32_t local_size, uint32_t words, uint32_t groups_cap, uint32_t seed) {
  CAPTURE(local_size);
  CAPTURE(words);
  const auto& fill = f.pipes().get(ShaderId::fill_u32, {{0, local_size}});
  CHECK(fill.local_size()[0] == local_size);
  const uint32_t tail = 13;  // words after `count` that must stay untouched
  Buffer buf = f.alloc().create_buffer(uint64_t(words + tail) * 4, MemoryUse::device, "fill");
  auto expected = random_words(words + tail, seed);
  f.xfer().upload(buf, expected);
  const CountValue push{words, 0x9e3779b9u ^ seed};
  const uint32_t groups = std::min(group_count(words, local_size, f.ctx().info().max_workgroup_count[0]), groups_cap);
  run_dispatch(f.ctx(), fill, {buf.span()}, as_push(push), {groups, 1, 1});
  std::fill(expected.begin(), expected.begin() + words, push.value);
  CHECK(f.xfer().download<uint32_t>(buf, words + tail) == expected);
}

}  // namespace

TEST_CASE_FIXTURE(VkFixture, "fill matches the CPU for odd sizes, workgroup sizes and capped group counts") {
  const uint32_t subgroup = ctx().info().subgroup_size;
  uint32_t seed = 11;
  for (uint32_t local : {1u, subgroup, 64u, 256u, 96u})
    for (uint32_t words : {1u, 7u, 1000u, 65537u}) check_fill(*this, local, words, ~0u, seed++);
  // Grid-stride loop: 3 workgroups still cover 100003 words.
  check_fill(*this, 64, 100003, 3, seed++);
}

TEST_CASE_FIXTURE(VkFixture, "copy_u32 and copy_u32x4 match the CPU") {
  for (uint32_t words : {1u, 5u, 4096u, 70001u}) {
    CAPTURE(words);
    const auto src_data = random_words(words, words);
    Buffer src = alloc().create_buffer(words * 4ull, MemoryUse::device, "src");
    Buffer dst = alloc().create_buffer(words * 4ull, MemoryUse::device, "dst");
    xfer().upload(src, src_data);
    xfer().upload(dst, random_words(words, words + 1));
    const uint32_t count = words;
    run_dispatch(ctx(), pipes().get(ShaderId::copy_u32, {{0, 128}}), {src.span(), dst.span()}, as_push(count),
                 {group_count(words, 128, 65535), 1, 1});
    CHECK(xfer().download<uint32_t>(dst, words) == src_data);

    // uvec4 variant: whole 16-byte elements; the remainder words stay as they were.
    xfer().upload(dst, random_words(words, words + 2));
    const auto before = xfer().download<uint32_t>(dst, words);
    const uint32_t vec4s = words / 4;
    if (vec4s > 0) {
      run_dispatch(ctx(), pipes().get(ShaderId::copy_u32x4, {{0, 64}}), {src.span(), dst.span()}, as_push(vec4s),
                   {group_count(vec4s, 64, 65535), 1, 1});
    }
    auto expected = before;
    std::copy(src_data.begin(), src_data.begin() + vec4s * 4, expected.begin());
    CHECK(xfer().download<uint32_t>(dst, words) == expected);
  }
}

namespace {

void check_add_f32(VkFixture& f) {
  for (uint32_t n : {1u, 3u, 1023u, 50001u}) {
    CAPTURE(n);
    const auto a = greta::test::random_floats(n, 100 + n, -10.f, 10.f);
    const auto b = greta::test::random_floats(n, 200 + n, -10.f, 10.f);
    Buffer ba = f.alloc().create_buffer(n * 4ull, MemoryUse::device, "a");
    Buffer bb = f.alloc().create_buffer(n * 4ull, MemoryUse::device, "b");
    Buffer bc = f.alloc().create_buffer(n * 4ull, MemoryUse::device, "c");
    f.xfer().upload(ba, a);
    f.xfer().upload(bb, b);
    f.xfer().upload(bc, greta::test::random_floats(n, 300 + n));
    const auto& add = f.pipes().get(ShaderId::add_f32, {{0, 256}});
    run_dispatch(f.ctx(), add, {ba.span(), bb.span(), bc.span()}, as_push(n), {group_count(n, 256, 65535), 1, 1});
    const auto c = f.xfer().download<float>(bc, n);
    size_t mismatches = 0;
    for (uint32_t i = 0; i < n; ++i) mismatches += c[i] != a[i] + b[i];  // IEEE addition is exact-rounded
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE_FIXTURE(VkFixture, "add_f32 matches the CPU bit for bit (push descriptors when available)") {
  check_add_f32(*this);
  CHECK(pipes().get(ShaderId::add_f32, {{0, 256}}).uses_push_descriptors() == ctx().features().push_descriptors);
}

TEST_CASE_FIXTURE(VkFixture, "add_f32 through descriptor pools (the fallback without push descriptors)") {
  ContextOptions o = test_options();
  o.push_descriptors = false;
  ctx(o);
  CHECK(!ctx().features().push_descriptors);
  CHECK(!pipes().get(ShaderId::add_f32, {{0, 256}}).uses_push_descriptors());
  check_add_f32(*this);
}

TEST_CASE_FIXTURE(VkFixture, "add_f16 matches the CPU within half an f16 ulp of rounding") {
  if (!ctx().features().shader_float16 || !ctx().features().storage_buffer_16bit) {
    MESSAGE("device lacks shaderFloat16 or 16-bit storage: add_f16 skipped");
    CHECK_THROWS_WITH_AS(pipes().get(ShaderId::add_f16), doctest::Contains("needs"), greta::Error);
    return;
  }
  const uint32_t n = 4099;
  const auto fa = greta::test::random_floats(n, 1, -4.f, 4.f);
  const auto fb = greta::test::random_floats(n, 2, -4.f, 4.f);
  std::vector<uint16_t> a(n), b(n);
  for (uint32_t i = 0; i < n; ++i) {
    a[i] = fp32_to_fp16(fa[i]);
    b[i] = fp32_to_fp16(fb[i]);
  }
  Buffer ba = alloc().create_buffer(n * 2ull, MemoryUse::device, "a16");
  Buffer bb = alloc().create_buffer(n * 2ull, MemoryUse::device, "b16");
  Buffer bc = alloc().create_buffer(n * 2ull, MemoryUse::device, "c16");
  xfer().upload(ba, a);
  xfer().upload(bb, b);
  const auto& add = pipes().get(ShaderId::add_f16, {{0, 64}});
  run_dispatch(ctx(), add, {ba.span(), bb.span(), bc.span()}, as_push(n), {group_count(n, 64, 65535), 1, 1});
  const auto c = xfer().download<uint16_t>(bc, n);
  size_t off = 0;
  for (uint32_t i = 0; i < n; ++i) {
    // The f32 sum of two halves rounds to the nearest half; allow one ulp for a device computing in f16 directly.
    const uint16_t expected = fp32_to_fp16(fp16_to_fp32(a[i]) + fp16_to_fp32(b[i]));
    off += std::abs(int(c[i]) - int(expected)) > 1 && !(fp16_to_fp32(c[i]) == 0 && fp16_to_fp32(expected) == 0);
  }
  CHECK(off == 0);
}

TEST_CASE_FIXTURE(VkFixture, "specialization constants make distinct pipelines; bad ones are clear errors") {
  const auto& a = pipes().get(ShaderId::fill_u32, {{0, 32}});
  const auto& b = pipes().get(ShaderId::fill_u32, {{0, 64}});
  const auto& a2 = pipes().get(ShaderId::fill_u32, {{0, 32}});
  CHECK(&a == &a2);
  CHECK(&a != &b);
  CHECK(pipes().size() == 2);
  CHECK(a.local_size() == std::array<uint32_t, 3>{32, 1, 1});
  CHECK(a.binding_count() == 1);
  CHECK(a.push_constant_bytes() == 8);
  const uint32_t too_big = ctx().info().max_workgroup_invocations + 1;
  CHECK_THROWS_WITH_AS(pipes().get(ShaderId::fill_u32, {{0, too_big}}), doctest::Contains("exceed"), greta::Error);
  CHECK_THROWS_WITH_AS(pipes().get(ShaderId::fill_u32, {{7, 1}}), doctest::Contains("no specialization constant 7"),
                       greta::Error);
  CHECK_THROWS_WITH_AS(pipes().get(ShaderId::fill_u32, {{0, 0}}), doctest::Contains("workgroup size"), greta::Error);
  CHECK_THROWS_WITH_AS(pipes().get(ShaderId::fill_u32, {{0, 64}, {0, 32}}), doctest::Contains("given twice"),
                       greta::Error);
}

TEST_CASE_FIXTURE(VkFixture, "subgroup size control: a pinned size runs, an impossible one is refused") {
  const DeviceInfo& info = ctx().info();
  CHECK_THROWS_AS(pipes().get(ShaderId::fill_u32, {{0, 64}}, PipelineOptions{3, false}), greta::Error);
  if (!ctx().features().subgroup_size_control) {
    MESSAGE("device has no subgroup size control");
    return;
  }
  for (uint32_t s = info.min_subgroup_size; s <= info.max_subgroup_size; s *= 2) {
    CAPTURE(s);
    const uint32_t local = s * 4;
    const auto& fill = pipes().get(ShaderId::fill_u32, {{0, local}}, PipelineOptions{s, ctx().features().compute_full_subgroups});
    Buffer buf = alloc().create_buffer(4000, MemoryUse::device, "pinned");
    const CountValue push{1000, 77};
    run_dispatch(ctx(), fill, {buf.span()}, as_push(push), {group_count(1000, local, 65535), 1, 1});
    CHECK(xfer().download<uint32_t>(buf, 1000) == std::vector<uint32_t>(1000, 77));
  }
  if (ctx().features().compute_full_subgroups)
    CHECK_THROWS_WITH_AS(pipes().get(ShaderId::fill_u32, {{0, info.max_subgroup_size + 1}}, PipelineOptions{0, true}),
                         doctest::Contains("multiple of"), greta::Error);
}

TEST_CASE_FIXTURE(VkFixture, "dispatch arguments are checked against the shader and the device") {
  const auto& add = pipes().get(ShaderId::add_f32, {{0, 64}});
  Buffer buf = alloc().create_buffer(4096, MemoryUse::device, "args");
  const uint32_t n = 16;
  RecordedSequence seq(ctx(), "bad args");
  CHECK_THROWS_WITH_AS(seq.record([&](Recorder& r) { r.dispatch(add, {buf.span(), buf.span()}, as_push(n), {1, 1, 1}); }),
                       doctest::Contains("2 buffers given, the shader has 3"), greta::Error);
  const CountValue wrong_push{1, 2};
  CHECK_THROWS_WITH_AS(
      seq.record([&](Recorder& r) { r.dispatch(add, {buf.span(), buf.span(), buf.span()}, as_push(wrong_push), {1, 1, 1}); }),
      doctest::Contains("8 bytes of push constants given, the shader's block has 4"), greta::Error);
  CHECK_THROWS_WITH_AS(seq.record([&](Recorder& r) {
    r.dispatch(add, {buf.span(), buf.span(), buf.span()}, as_push(n), {ctx().info().max_workgroup_count[0] + 1u, 1, 1});
  }),
                       doctest::Contains("workgroups along dimension 0"), greta::Error);
  if (ctx().info().min_storage_buffer_offset_alignment > 1) {
    CHECK_THROWS_WITH_AS(seq.record([&](Recorder& r) {
      r.dispatch(add, {buf.span(1, 64), buf.span(), buf.span()}, as_push(n), {1, 1, 1});
    }),
                         doctest::Contains("minStorageBufferOffsetAlignment"), greta::Error);
  }
  CHECK_THROWS_WITH_AS(seq.record([&](Recorder& r) { r.fill(buf.span(2, 8), 1); }), doctest::Contains("multiples of 4"),
                       greta::Error);
  CHECK_THROWS_WITH_AS(seq.record([&](Recorder& r) { r.copy(buf.span(0, 8), buf.span(8, 16)); }),
                       doctest::Contains("copy of 8 bytes into a span of 16"), greta::Error);
  CHECK_THROWS_WITH_AS(seq.submit(), doctest::Contains("before it was recorded"), greta::Error);
}

namespace {

// rmsnorm.comp's and glu.comp's push constants.
struct NormPush {
  uint32_t in_row_offset, rows, width;
  float eps;
  uint32_t parts, part_stride;
};
struct GluPush {
  uint32_t count;
  float alpha, limit;
  uint32_t gate_parts, gate_stride, up_parts, up_stride, keep_gate, keep_up, cols;  // cols: Q8_OUT's row width
};

// An F16_OUT kernel's outputs against the plain kernel's `want`: f32 values that differ in any bit, and f16 copies
// more than one ulp from `want` rounded to nearest even (a device may round its own way).
struct F16OutMismatch {
  size_t f32 = 0, f16 = 0;
};
F16OutMismatch f16_out_mismatch(const std::vector<float>& want, const std::vector<float>& got,
                                const std::vector<uint16_t>& half) {
  F16OutMismatch m;
  for (size_t i = 0; i < want.size(); ++i) {
    m.f32 += got[i] != want[i];
    m.f16 += std::abs(int(half[i]) - int(fp32_to_fp16(want[i]))) > 1;
  }
  return m;
}

}  // namespace

// The inputs of the norm, GLU and quantizer tests below, uploaded: x and up rows [n] in [-3, 3), a norm weight
// [width] in [0.5, 1.5), from seeds seed, seed + 1, seed + 2.
struct NormGluInputs {
  Buffer x, w, up;
};
NormGluInputs upload_norm_glu_inputs(VkFixture& f, uint32_t n, uint32_t width, uint32_t seed) {
  NormGluInputs in{f.alloc().create_buffer(n * 4ull, MemoryUse::device, "x"),
                   f.alloc().create_buffer(width * 4ull, MemoryUse::device, "w"),
                   f.alloc().create_buffer(n * 4ull, MemoryUse::device, "up")};
  f.xfer().upload(in.x, greta::test::random_floats(n, seed, -3.f, 3.f));
  f.xfer().upload(in.w, greta::test::random_floats(width, seed + 1, 0.5f, 1.5f));
  f.xfer().upload(in.up, greta::test::random_floats(n, seed + 2, -3.f, 3.f));
  return in;
}

// F16_OUT of rmsnorm.comp and glu.comp (the f16 activations of the cooperative-matrix GEMM that reads their output,
// made beside it: OpEncoder::f16_target): the f32 output is the same bits as without it, and the f16 copy is that
// output rounded to nearest even (within one ulp, as a device may round its own way). Odd row counts and widths.
TEST_CASE_FIXTURE(VkFixture, "rmsnorm and glu with F16_OUT write the f32 output unchanged and its f16 copy") {
  const uint32_t rows = 5, width = 132, n = rows * width;
  auto [bx, bw, bu] = upload_norm_glu_inputs(*this, n, width, 41);
  Buffer plain = alloc().create_buffer(n * 4ull, MemoryUse::device, "plain");
  Buffer out = alloc().create_buffer(n * 4ull, MemoryUse::device, "out");
  Buffer half = alloc().create_buffer(n * 2ull, MemoryUse::device, "half");
  const auto check = [&](const char* what) {
    CAPTURE(what);
    const auto want = xfer().download<float>(plain, n);
    const auto got = xfer().download<float>(out, n);
    const F16OutMismatch off = f16_out_mismatch(want, got, xfer().download<uint16_t>(half, n));
    CHECK(off.f32 == 0);
    CHECK(off.f16 == 0);
    CHECK(std::abs(want[7]) > 0.f);  // not a run that wrote nothing
  };
  // No split-K partials (parts 0): binding 4 is bound to the input again, and binding 5 (Q8_OUT) to the output, as
  // the backend does.
  const NormPush norm_push{0, rows, width, 1e-5f, 0, 0};
  for (uint32_t local : {32u, 64u, 256u}) {
    CAPTURE(local);
    const auto& norm = pipes().get(ShaderId::rmsnorm_f32, {{0, local}, {1, 0}});
    const auto& norm16 = pipes().get(ShaderId::rmsnorm_f32, {{0, local}, {1, 1}});
    run_dispatch(ctx(), norm, {bx.span(), bw.span(), plain.span(), plain.span(), bx.span(), plain.span()},
                 as_push(norm_push), {rows, 1, 1});
    run_dispatch(ctx(), norm16, {bx.span(), bw.span(), out.span(), half.span(), bx.span(), out.span()},
                 as_push(norm_push), {rows, 1, 1});
    check("rmsnorm");
  }
  const GluPush glu_push{n, 1.702f, 7.f, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t kind : {0u, 1u, 2u}) {
    CAPTURE(kind);
    const auto& glu = pipes().get(ShaderId::glu_f32, {{0, 64}, {1, kind}, {2, 0}});
    const auto& glu16 = pipes().get(ShaderId::glu_f32, {{0, 64}, {1, kind}, {2, 1}});
    run_dispatch(ctx(), glu, {bx.span(), bu.span(), plain.span(), plain.span(), bx.span(), bu.span()}, as_push(glu_push),
                 {group_count(n, 64, 65535), 1, 1});
    run_dispatch(ctx(), glu16, {bx.span(), bu.span(), out.span(), half.span(), bx.span(), bu.span()},
                 as_push(glu_push),
                 {group_count(n / 4, 64, 65535), 1, 1});
    check("glu");
  }
}

// F16_OUT of attention_decode.comp (the f16 input of a batched step's cooperative-matrix output projection, written
// by the workgroup that writes each row: OpEncoder::f16_target): the f32 rows are the same bits as without it and the
// f16 copy is them rounded to nearest even (within one ulp). Three sequences of 101, 6 and 64 positions over a paged
// cache, merged from 4 key splits of 32 and written by one split of 128 (the two paths that write rows).
TEST_CASE_FIXTURE(VkFixture, "attention_decode with F16_OUT writes the f32 rows unchanged and their f16 copy") {
  const DeviceInfo& info = ctx().info();
  if (!info.compute_full_subgroups || (info.subgroup_operations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) == 0) return;
  const uint32_t tokens = 3, heads = 4, kv_heads = 2, dim = 64, page = 32, pages_per_seq = 4;
  const uint32_t rows = tokens * heads, cache_rows = tokens * pages_per_seq * page, n = rows * dim;
  const auto q = greta::test::random_floats(n, 51, -1.f, 1.f);
  const auto k = greta::test::random_floats(cache_rows * kv_heads * dim, 52, -1.f, 1.f);
  const auto v = greta::test::random_floats(cache_rows * kv_heads * dim, 53, -2.f, 2.f);
  const std::vector<int32_t> positions{100, 5, 63}, seq{0, 1, 2};
  std::vector<int32_t> pages(tokens * pages_per_seq);
  for (uint32_t i = 0; i < pages.size(); ++i) pages[i] = int32_t(pages.size() - 1 - i);  // not the identity
  const auto buffer = [&](uint64_t bytes, const char* name) {
    return alloc().create_buffer(bytes, MemoryUse::device, name);
  };
  Buffer bq = buffer(n * 4ull, "q"), bk = buffer(k.size() * 4ull, "k"), bv = buffer(v.size() * 4ull, "v");
  Buffer bpos = buffer(tokens * 4ull, "positions"), bseq = buffer(tokens * 4ull, "seq");
  Buffer bpages = buffer(pages.size() * 4ull, "pages"), counters = buffer(rows * 4ull, "counters");
  Buffer partials = buffer(rows * 4ull * (dim + 2) * 4, "partials"), args = buffer(16, "split args");
  Buffer plain = buffer(n * 4ull, "plain"), out = buffer(n * 4ull, "out"), half = buffer(n * 2ull, "half");
  xfer().upload(bq, q);
  xfer().upload(bk, k);
  xfer().upload(bv, v);
  xfer().upload(bpos, positions);
  xfer().upload(bseq, seq);
  xfer().upload(bpages, pages);
  xfer().upload(counters, std::vector<uint32_t>(rows, 0));  // the merging workgroup resets its row's counter
  const uint32_t sg = info.subgroup_size, lanes = std::min(4u, sg);  // 16 vec4 of head dim: 4 lanes x 4 vec4
  PipelineOptions options;
  options.full_subgroups = true;
  if (info.subgroup_size_control) options.required_subgroup_size = sg;
  struct Push {
    uint32_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v;
    float scale;
    uint32_t split_keys, page_size, pages_per_seq, window, has_sinks;
  };
  for (uint32_t keys : {32u, 128u}) {
    CAPTURE(keys);
    const uint32_t splits = (101 + keys - 1) / keys;
    xfer().upload(args, std::vector<uint32_t>{rows, splits, 1, keys});
    const Push push{tokens, heads, kv_heads, dim, dim, 0.125f, keys, page, pages_per_seq, 0, 0};
    const auto run = [&](bool f16, Buffer& y) {
      const auto& p = pipes().get(
          ShaderId::attention_decode_f32,
          {{0, 4 * sg}, {1, 1}, {2, 0}, {3, page}, {4, 1}, {5, lanes}, {6, 16 / lanes}, {7, f16}}, options);
      run_dispatch(ctx(), p,
                   {bq.span(), bk.span(), bv.span(), bpos.span(), y.span(), partials.span(), counters.span(), y.span(),
                    bseq.span(), bpages.span(), bq.span(), args.span(), f16 ? half.span() : y.span()},
                   as_push(push), {rows, splits, 1});
    };
    run(false, plain);
    run(true, out);
    const auto want = xfer().download<float>(plain, n), got = xfer().download<float>(out, n);
    const F16OutMismatch off = f16_out_mismatch(want, got, xfer().download<uint16_t>(half, n));
    CHECK(off.f32 == 0);
    CHECK(off.f16 == 0);
    CHECK(std::count(want.begin(), want.end(), 0.f) == 0);  // every row was written
  }
}

// glu.comp's F16_OUT path adding split-K partials (a batched step's gate and up, OpEncoder::take_split_sum): its vec4
// reads give the same bits as the scalar path, for the product, its f16 copy and the sums written back to gate and up.
TEST_CASE_FIXTURE(VkFixture, "glu with F16_OUT adds gate's and up's split-K partials as the scalar path does") {
  const uint32_t n = 5 * 132, stride = n + 12, gate_parts = 2, up_parts = 3;  // strides of whole vec4, not of 64
  const auto gate = greta::test::random_floats(n, 61, -3.f, 3.f), up = greta::test::random_floats(n, 62, -3.f, 3.f);
  const auto gp = greta::test::random_floats(gate_parts * stride, 63, -1.f, 1.f);
  const auto upp = greta::test::random_floats(up_parts * stride, 64, -1.f, 1.f);
  const auto buffer = [&](uint64_t floats, const char* name) {
    return alloc().create_buffer(floats * 4, MemoryUse::device, name);
  };
  Buffer bg = buffer(n, "gate"), bu = buffer(n, "up"), bgp = buffer(gp.size(), "gate partials");
  Buffer bup = buffer(upp.size(), "up partials"), out = buffer(n, "out"), half = buffer(n / 2, "half");
  xfer().upload(bgp, gp);
  xfer().upload(bup, upp);
  const GluPush push{n, 1.702f, 7.f, gate_parts, stride, up_parts, stride, 1, 1, 0};
  struct Result {
    std::vector<float> out, gate, up;
    std::vector<uint16_t> half;
  };
  const auto run = [&](bool f16) {
    xfer().upload(bg, gate);  // the sums are written back: fresh inputs for each run
    xfer().upload(bu, up);
    const auto& p = pipes().get(ShaderId::glu_f32, {{0, 64}, {1, 0}, {2, f16}});
    run_dispatch(ctx(), p, {bg.span(), bu.span(), out.span(), f16 ? half.span() : out.span(), bgp.span(), bup.span()},
                 as_push(push), {group_count(f16 ? n / 4 : n, 64, 65535), 1, 1});
    return Result{xfer().download<float>(out, n), xfer().download<float>(bg, n), xfer().download<float>(bu, n),
                  f16 ? xfer().download<uint16_t>(half, n) : std::vector<uint16_t>{}};
  };
  const Result want = run(false), got = run(true);
  const F16OutMismatch off = f16_out_mismatch(want.out, got.out, got.half);
  CHECK(off.f32 == 0);
  CHECK(off.f16 == 0);
  CHECK(got.gate == want.gate);  // the sums written back
  CHECK(got.up == want.up);
  CHECK(want.gate[3] == doctest::Approx(gate[3] + gp[3] + gp[stride + 3]));  // the partials were added
  CHECK(want.up[5] == doctest::Approx(up[5] + upp[5] + upp[stride + 5] + upp[2 * stride + 5]));
}

// Q8_OUT of rmsnorm.comp and glu.comp (glu_f32_q8): the int8 input of the int8 cooperative-matrix GEMMs that read
// their output (matmul_coopmat_q8.comp), made beside it (OpEncoder::q8_target). The f32 output is the same bits as
// without it and the int8 rows are word for word what quantize_q8.comp makes of that output: the codes and the f32
// scale of every 32-element block. 5 rows of 160 (5 blocks each), with F16_OUT at the same time for the norm.
TEST_CASE_FIXTURE(VkFixture, "rmsnorm and glu with Q8_OUT write the int8 rows quantize_q8 makes of their output") {
  const uint32_t rows = 5, width = 160, n = rows * width, q8_words = n / 32 * 9;
  auto [bx, bw, bu] = upload_norm_glu_inputs(*this, n, width, 71);
  const auto buffer = [&](uint64_t bytes, const char* name) {
    return alloc().create_buffer(bytes, MemoryUse::device, name);
  };
  Buffer plain = buffer(n * 4ull, "plain"), out = buffer(n * 4ull, "out"), half = buffer(n * 2ull, "half");
  Buffer want_q8 = buffer(q8_words * 4ull, "want q8"), got_q8 = buffer(q8_words * 4ull, "got q8");
  PipelineOptions full;
  full.full_subgroups = ctx().info().compute_full_subgroups;
  const auto check = [&](const char* what) {
    CAPTURE(what);
    // The quantizer's plain input: the kernel's f32 output as made without Q8_OUT.
    const struct { uint32_t cols, rows, x_row0; float eps; } qpush{width, rows, 0, 0.f};
    const auto& quantize = pipes().get(ShaderId::quantize_q8, {{0, 64}, {1, 0}});
    xfer().upload(want_q8, std::vector<uint32_t>(q8_words, 0xdeadbeefu));
    run_dispatch(ctx(), quantize, {plain.span(), plain.span(), want_q8.span()}, as_push(qpush), {rows, 1, 1});
    const auto want = xfer().download<float>(plain, n), got = xfer().download<float>(out, n);
    CHECK(got == want);
    const auto want_words = xfer().download<uint32_t>(want_q8, q8_words);
    const auto got_words = xfer().download<uint32_t>(got_q8, q8_words);
    CHECK(got_words == want_words);
    CHECK(want_words[3] != 0u);  // codes were written
    CHECK(std::abs(want[7]) > 0.f);
  };
  const NormPush norm_push{0, rows, width, 1e-5f, 0, 0};
  for (uint32_t local : {32u, 64u, 256u}) {
    CAPTURE(local);
    const auto& norm = pipes().get(ShaderId::rmsnorm_f32, {{0, local}, {1, 0}, {2, 0}});
    const auto& norm_q8 = pipes().get(ShaderId::rmsnorm_f32, {{0, local}, {1, 1}, {2, 1}}, full);
    run_dispatch(ctx(), norm, {bx.span(), bw.span(), plain.span(), plain.span(), bx.span(), plain.span()},
                 as_push(norm_push), {rows, 1, 1});
    xfer().upload(got_q8, std::vector<uint32_t>(q8_words, 0u));
    run_dispatch(ctx(), norm_q8, {bx.span(), bw.span(), out.span(), half.span(), bx.span(), got_q8.span()},
                 as_push(norm_push), {rows, 1, 1});
    check("rmsnorm");
  }
  const GluPush glu_push{n, 1.702f, 7.f, 0, 0, 0, 0, 0, 0, width};
  for (uint32_t kind : {0u, 2u}) {
    CAPTURE(kind);
    const auto& glu = pipes().get(ShaderId::glu_f32, {{0, 64}, {1, kind}, {2, 0}});
    const auto& glu_q8 = pipes().get(ShaderId::glu_f32_q8, {{0, 64}, {1, kind}, {2, 0}}, full);
    run_dispatch(ctx(), glu, {bx.span(), bu.span(), plain.span(), plain.span(), bx.span(), bu.span()},
                 as_push(glu_push), {group_count(n, 64, 65535), 1, 1});
    xfer().upload(got_q8, std::vector<uint32_t>(q8_words, 0u));
    run_dispatch(ctx(), glu_q8, {bx.span(), bu.span(), out.span(), out.span(), bx.span(), bu.span(), got_q8.span()},
                 as_push(glu_push), {group_count(n / 4, 64, 65535), 1, 1});
    check("glu");
  }
}

// quantize_q8.comp's chunks (workgroups side by side along a row, grid-stride when fewer than the chunks) and its
// block maxima by subgroup shuffles (LANES) against one workgroup per row with maxima in shared memory: word for word,
// for a plain, an rmsnorm and a SwiGLU input. Rows of 352 elements (88 groups: 11 blocks); the rmsnorm's sum of
// squares depends on the workgroup size only, so each size is compared with itself in one chunk.
TEST_CASE_FIXTURE(VkFixture, "quantize_q8 in chunks and with shuffled block maxima writes the same int8 rows") {
  const uint32_t rows = 3, width = 352, n = rows * width, q8_words = n / 32 * 9;
  auto [bx, bw, bu] = upload_norm_glu_inputs(*this, n, width, 81);
  Buffer want = alloc().create_buffer(q8_words * 4ull, MemoryUse::device, "want");
  Buffer got = alloc().create_buffer(q8_words * 4ull, MemoryUse::device, "got");
  const struct { uint32_t cols, rows, x_row0; float eps; } push{width, rows, 0, 1e-5f};
  const auto quantize = [&](Buffer& out, uint32_t input, uint32_t local, bool lanes, uint32_t chunks) {
    PipelineOptions options;  // as OpEncoder::q8_lanes_options
    if (lanes) options.full_subgroups = ctx().info().compute_full_subgroups;
    const auto& p = pipes().get(ShaderId::quantize_q8, {{0, local}, {1, input}, {4, lanes ? 1u : 0u}}, options);
    const BufferSpan aux = input == 1 ? bw.span() : input == 2 ? bu.span() : bx.span();
    xfer().upload(out, std::vector<uint32_t>(q8_words, 0xdeadbeefu));
    run_dispatch(ctx(), p, {bx.span(), aux, out.span()}, as_push(push), {rows, chunks, 1});
    return xfer().download<uint32_t>(out, q8_words);
  };
  for (uint32_t input : {0u, 1u, 2u})
    for (uint32_t local : {8u, 16u, 32u, 64u}) {
      CAPTURE(input);
      CAPTURE(local);
      const auto reference = quantize(want, input, local, false, 1);
      CHECK(reference[5] != 0xdeadbeefu);
      CHECK(reference[q8_words - 1] != 0xdeadbeefu);  // the last row's last scale
      // All chunks at once (88 / local of them, rounded up), two workgroups walking them, and one.
      const uint32_t chunks = (width / 4 + local - 1) / local;
      for (uint32_t groups : {chunks, 2u, 1u})
        for (bool lanes : {false, true}) {
          const uint32_t sg = ctx().info().subgroup_size;
          if (lanes && (sg < 8 || local % sg != 0)) continue;  // OpEncoder::q8_lanes: whole subgroups of >= 8
          CAPTURE(groups);
          CAPTURE(lanes);
          CHECK(quantize(got, input, local, lanes, groups) == reference);
        }
    }
}
