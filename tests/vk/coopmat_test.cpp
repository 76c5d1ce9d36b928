// The first cooperative-matrix kernel: C (f32) = A (f16) * B (f16) with 16x16x16 subgroup tiles, against the CPU.
// Runs only on devices with VK_KHR_cooperative_matrix and that shape (not lavapipe): elsewhere it skips with a
// MESSAGE, after checking that asking for the pipeline is a clear error rather than a crash.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;

TEST_CASE_FIXTURE(VkFixture, "coopmat 16x16x16 f16*f16->f32 tile multiply matches the CPU") {
  if (!shader_available(ShaderId::coopmat_tile_f16_f32)) {
    MESSAGE("skipped: this build's glslang could not compile GL_KHR_cooperative_matrix");
    CHECK_THROWS_WITH_AS(pipes().get(ShaderId::coopmat_tile_f16_f32), doctest::Contains("not compiled"), greta::Error);
    return;
  }
  const DeviceInfo& info = ctx().info();
  if (!ctx().features().cooperative_matrix ||
      !info.supports_coopmat(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR)) {
    MESSAGE("skipped: device " << info.name << " has no VK_KHR_cooperative_matrix 16x16x16 f16*f16->f32 shape");
    if (!ctx().features().cooperative_matrix)
      CHECK_THROWS_WITH_AS(pipes().get(ShaderId::coopmat_tile_f16_f32, {{0, info.subgroup_size}}),
                           doctest::Contains("VK_KHR_cooperative_matrix"), greta::Error);
    return;
  }
  // One subgroup per workgroup: pin the subgroup size where the device lets us (AMD: 32 or 64).
  PipelineOptions options;
  if (ctx().features().subgroup_size_control) options.required_subgroup_size = info.subgroup_size;
  const auto& pipeline = pipes().get(ShaderId::coopmat_tile_f16_f32, {{0, info.subgroup_size}}, options);

  for (auto [m, n, k] : {std::array<uint32_t, 3>{16, 16, 16}, {32, 48, 64}, {64, 16, 272}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const auto fa = greta::test::random_floats(size_t(m) * k, m * 7 + k);
    const auto fb = greta::test::random_floats(size_t(k) * n, n * 13 + k);
    std::vector<uint16_t> a(fa.size()), b(fb.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = fp32_to_fp16(fa[i]);
    for (size_t i = 0; i < b.size(); ++i) b[i] = fp32_to_fp16(fb[i]);
    Buffer ba = alloc().create_buffer(a.size() * 2, MemoryUse::device, "A");
    Buffer bb = alloc().create_buffer(b.size() * 2, MemoryUse::device, "B");
    Buffer bc = alloc().create_buffer(size_t(m) * n * 4, MemoryUse::device, "C");
    xfer().upload(ba, a);
    xfer().upload(bb, b);
    const std::array<uint32_t, 3> push{m, n, k};
    run_dispatch(ctx(), pipeline, {ba.span(), bb.span(), bc.span()}, as_push(push), {n / 16, m / 16, 1});
    const auto c = xfer().download<float>(bc, size_t(m) * n);
    std::vector<float> ref(size_t(m) * n);
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t j = 0; j < n; ++j) {
        double s = 0;
        for (uint32_t kk = 0; kk < k; ++kk) s += double(fp16_to_fp32(a[i * k + kk])) * fp16_to_fp32(b[kk * n + j]);
        ref[i * n + j] = float(s);
      }
    CHECK(greta::test::nmse(c.data(), ref.data(), c.size()) < 1e-9);
  }
}
