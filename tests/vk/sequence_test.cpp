// Recorded sequences resubmitted with new inputs, barriers between dependent operations, the queue's timeline
// tickets, and GPU timestamps / the profiler.
#include <chrono>
#include <optional>
#include <doctest/doctest.h>

#include "core/error.h"
#include "vk/profiler.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;

TEST_CASE_FIXTURE(VkFixture, "a sequence recorded once runs again and again with different inputs") {
  const uint32_t n = 3001;
  Buffer a = alloc().create_buffer(n * 4, MemoryUse::device, "a");
  Buffer b = alloc().create_buffer(n * 4, MemoryUse::device, "b");
  Buffer c = alloc().create_buffer(n * 4, MemoryUse::device, "c");
  const auto& add = pipes().get(ShaderId::add_f32, {{0, 128}});
  RecordedSequence seq(ctx(), "add");
  seq.record([&](Recorder& r) { r.dispatch(add, {a.span(), b.span(), c.span()}, as_push(n), {group_count(n, 128, 65535), 1, 1}); });
  CHECK(seq.recorded());
  CHECK(seq.operation_count() == 1);
  for (uint32_t iter = 0; iter < 6; ++iter) {
    CAPTURE(iter);
    const auto va = greta::test::random_floats(n, 10 * iter + 1);
    const auto vb = greta::test::random_floats(n, 10 * iter + 2);
    xfer().upload(a, va);
    xfer().upload(b, vb);
    const uint64_t ticket = seq.submit();
    CHECK(ticket == ctx().queue().last_submitted());
    const auto vc = xfer().download<float>(c, n);  // the download's leading barrier orders it after the add
    size_t bad = 0;
    for (uint32_t i = 0; i < n; ++i) bad += vc[i] != va[i] + vb[i];
    REQUIRE(bad == 0);
  }
}

TEST_CASE_FIXTURE(VkFixture, "back-to-back submissions of one recording are ordered") {
  // x <- x + x, submitted 5 times without waiting in between: the leading barrier must serialize them.
  const uint32_t n = 1000;
  Buffer x = alloc().create_buffer(n * 4, MemoryUse::device, "x");
  const auto v = greta::test::random_floats(n, 3);
  xfer().upload(x, v);
  const auto& add = pipes().get(ShaderId::add_f32, {{0, 64}});
  RecordedSequence seq(ctx(), "double");
  seq.record([&](Recorder& r) { r.dispatch(add, {x.span(), x.span(), x.span()}, as_push(n), {group_count(n, 64, 65535), 1, 1}); });
  for (int i = 0; i < 5; ++i) seq.submit();
  seq.wait();
  const auto out = xfer().download<float>(x, n);
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) bad += out[i] != v[i] * 32.0f;  // exact: powers of two
  CHECK(bad == 0);
}

TEST_CASE_FIXTURE(VkFixture, "dependent operations separated by barriers: fill, copy, add, vkCmdFillBuffer") {
  const uint32_t n = 777;
  Buffer a = alloc().create_buffer(n * 4, MemoryUse::device, "a");
  Buffer b = alloc().create_buffer(n * 4, MemoryUse::device, "b");
  Buffer c = alloc().create_buffer(n * 4, MemoryUse::device, "c");
  Buffer d = alloc().create_buffer(n * 4 + 8, MemoryUse::device, "d");
  const auto vb = greta::test::random_floats(n, 21);
  xfer().upload(b, vb);
  const float fill_value = 1.25f;
  struct {
    uint32_t count;
    uint32_t value;
  } fill_push{n, 0};
  std::memcpy(&fill_push.value, &fill_value, 4);
  RecordedSequence seq(ctx(), "chain");
  seq.record([&](Recorder& r) {
    r.dispatch(pipes().get(ShaderId::fill_u32, {{0, 64}}), {a.span()}, as_push(fill_push), {4, 1, 1}, "fill a");
    r.barrier();
    r.dispatch(pipes().get(ShaderId::copy_u32, {{0, 64}}), {a.span(), c.span()}, as_push(n), {2, 1, 1}, "a -> c");
    r.barrier();
    r.dispatch(pipes().get(ShaderId::add_f32, {{0, 32}}), {c.span(), b.span(), c.span()}, as_push(n), {5, 1, 1}, "c += b");
    r.barrier();
    r.fill(d.span(), 0xdeadbeefu);
    r.barrier();
    r.copy(c.span(), d.span(8, n * 4));
  });
  CHECK(seq.operation_count() == 5);
  seq.run();
  const auto out = xfer().download<float>(c, n);
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) bad += out[i] != fill_value + vb[i];
  CHECK(bad == 0);
  const auto dw = xfer().download<uint32_t>(d, n + 2);
  CHECK(dw[0] == 0xdeadbeefu);
  CHECK(dw[1] == 0xdeadbeefu);
  CHECK(std::memcmp(dw.data() + 2, out.data(), n * 4) == 0);

  // Re-recording replaces the commands.
  seq.record([&](Recorder& r) { r.fill(c.span(), 0x3f800000u); });
  seq.run();
  CHECK(xfer().download<float>(c, n) == std::vector<float>(n, 1.0f));
}

TEST_CASE_FIXTURE(VkFixture, "queue tickets are monotonic and waits are checked") {
  Queue& q = ctx().queue();
  q.wait(0);  // nothing to wait for
  CHECK_THROWS_AS(q.wait(q.last_submitted() + 5), greta::Error);
  Buffer buf = alloc().create_buffer(64, MemoryUse::device, "t");
  RecordedSequence seq(ctx(), "tick");
  seq.record([&](Recorder& r) { r.fill(buf.span(), 1); });
  uint64_t last = q.last_submitted();
  for (int i = 0; i < 4; ++i) {
    const uint64_t t = seq.submit();
    CHECK(t == last + 1);
    last = t;
  }
  q.wait(last);
  CHECK(q.completed_value() >= last);
  CHECK(q.is_done(last));
}

TEST_CASE_FIXTURE(VkFixture, "GPU timestamps: one per timed operation, non-negative, ordered across barriers") {
  const uint32_t n = 20000;
  Buffer a = alloc().create_buffer(n * 4, MemoryUse::device, "a");
  Buffer b = alloc().create_buffer(n * 4, MemoryUse::device, "b");
  const auto& fill = pipes().get(ShaderId::fill_u32, {{0, 64}});
  const auto& copy = pipes().get(ShaderId::copy_u32, {{0, 64}});
  RecordedSequence seq(ctx(), "profiled", {true});
  if (ctx().info().timestamp_valid_bits == 0) {
    MESSAGE("the compute queue has no timestamps");
    return;
  }
  struct {
    uint32_t count, value;
  } push{n, 5};
  seq.record([&](Recorder& r) {
    r.dispatch(fill, {a.span()}, as_push(push), {group_count(n, 64, 65535), 1, 1}, "fill");
    r.barrier();
    r.dispatch(copy, {a.span(), b.span()}, as_push(n), {group_count(n, 64, 65535), 1, 1}, "copy");
    r.barrier();
    r.copy(b.span(), a.span(), "transfer copy");
    r.barrier();
    r.dispatch(copy, {a.span(), b.span()}, as_push(n), {group_count(n, 64, 65535), 1, 1});
  });
  CHECK(seq.profiling());
  CHECK(seq.timings().empty());  // not submitted yet
  Profiler profiler;
  for (int run = 0; run < 3; ++run) {
    seq.run();
    const auto t = seq.timings();
    REQUIRE(t.size() == 4);
    CHECK(t[0].label == "fill");
    CHECK(t[1].label == "copy");
    CHECK(t[2].label == "transfer copy");
    CHECK(t[3].label == "copy_u32");  // unlabeled dispatches are named after their shader
    CHECK(t[0].start_ns == 0.0);
    for (size_t i = 0; i < t.size(); ++i) {
      CAPTURE(i);
      CHECK(t[i].start_ns >= 0.0);
      CHECK(t[i].end_ns >= t[i].start_ns);
      if (i > 0) CHECK(t[i].start_ns >= t[i - 1].start_ns);
    }
    CHECK(t.back().end_ns > 0.0);
    profiler.add(t);
  }
  const auto entries = profiler.entries();
  REQUIRE(entries.size() == 4);
  uint64_t total_count = 0;
  for (const auto& e : entries) {
    total_count += e.count;
    CHECK(e.min_ns <= e.mean_ns());
    CHECK(e.mean_ns() <= e.max_ns);
  }
  CHECK(total_count == 12);
  const std::string report = profiler.report();
  CHECK(report.find("transfer copy") != std::string::npos);
  CHECK(report.find("copy_u32") != std::string::npos);
  CHECK(xfer().download<uint32_t>(b, n) == std::vector<uint32_t>(n, 5));
}

TEST_CASE_FIXTURE(VkFixture, "GPU span of a recording: first to last command, within the host's submit-to-done time") {
  const uint32_t n = 200000;
  Buffer a = alloc().create_buffer(n * 4, MemoryUse::device, "a");
  Buffer b = alloc().create_buffer(n * 4, MemoryUse::device, "b");
  const auto& fill = pipes().get(ShaderId::fill_u32, {{0, 64}});
  const auto& copy = pipes().get(ShaderId::copy_u32, {{0, 64}});
  struct {
    uint32_t count, value;
  } push{n, 7};
  const auto work = [&](Recorder& r) {
    r.dispatch(fill, {a.span()}, as_push(push), {group_count(n, 64, 65535), 1, 1}, "fill");
    r.barrier();
    for (int i = 0; i < 4; ++i) {
      r.dispatch(copy, {a.span(), b.span()}, as_push(n), {group_count(n, 64, 65535), 1, 1});
      r.barrier();
    }
  };
  RecordedSequence plain(ctx(), "plain"), spanned(ctx(), "spanned", {.span = true}),
      both(ctx(), "profiled", {.profile = true, .span = true});
  plain.record(work);
  spanned.record(work);
  both.record(work);
  CHECK(!spanned.span_seconds());  // not submitted yet
  const bool timestamps = ctx().info().timestamp_valid_bits > 0;
  for (int run = 0; run < 3; ++run) {
    plain.run();
    CHECK(!plain.span_seconds());
    const auto start = std::chrono::steady_clock::now();
    spanned.run();
    const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::optional<double> span = spanned.span_seconds();
    CHECK(span.has_value() == timestamps);
    if (span) {
      CHECK(*span > 0.0);
      CHECK(*span <= host * 1.01 + 1e-5);  // the device ran it between the submit and the wait's return
    }
    both.run();
    CHECK(!both.span_seconds());  // profiling's own timestamps cover it
    CHECK(both.timings().size() == (timestamps ? 5u : 0u));
  }
  CHECK(xfer().download<uint32_t>(b, n) == std::vector<uint32_t>(n, 7));
}

TEST_CASE("timings_from_ticks masks narrow counters and survives one wrap-around") {
  const std::vector<std::string> labels{"a", "b"};
  SUBCASE("64-bit") {
    const uint64_t ticks[] = {1000, 1500, 1600, 2600};
    const auto t = timings_from_ticks(labels, ticks, 64, 2.0);
    REQUIRE(t.size() == 2);
    CHECK(t[0].start_ns == 0.0);
    CHECK(t[0].end_ns == 1000.0);
    CHECK(t[1].start_ns == 1200.0);
    CHECK(t[1].duration_ns() == 2000.0);
  }
  SUBCASE("36 valid bits with garbage above them and a wrap") {
    const uint64_t wrap = uint64_t(1) << 36;
    const uint64_t garbage = uint64_t(0xabc) << 52;
    const uint64_t ticks[] = {garbage | (wrap - 100), garbage | (wrap - 50), garbage | 10, garbage | 60};
    const auto t = timings_from_ticks(labels, ticks, 36, 1.0);
    REQUIRE(t.size() == 2);
    CHECK(t[0].end_ns == 50.0);
    CHECK(t[1].start_ns == 110.0);
    CHECK(t[1].end_ns == 160.0);
  }
  SUBCASE("no timestamps") {
    const uint64_t ticks[] = {1, 2, 3, 4};
    CHECK(timings_from_ticks(labels, ticks, 0, 1.0).empty());
  }
}
