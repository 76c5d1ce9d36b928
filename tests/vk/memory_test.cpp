// Memory: buffer round trips through the staging ring (1 byte to several chunks, odd sizes and offsets), split
// buffers under forced small limits, out-of-memory / bad-size errors, and a read-only file mapping imported as
// device memory (VK_EXT_external_memory_host).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;

TEST_CASE("plan_chunks cuts whole granules within the limit") {
  SUBCASE("fixed cases") {
    CHECK(plan_chunks(10, 1, 100) == std::vector<uint64_t>{10});
    CHECK(plan_chunks(100, 4, 100) == std::vector<uint64_t>{100});
    CHECK(plan_chunks(101, 4, 100) == std::vector<uint64_t>{100, 1});
    CHECK(plan_chunks(250, 10, 100) == std::vector<uint64_t>{100, 100, 50});
    // granule 34 (a Q8_0 block): chunk = whole lcm(34, 4) = 68-byte units -> 952 of 1000
    CHECK(plan_chunks(34 * 100, 34, 1000) == std::vector<uint64_t>{952, 952, 952, 544});
    // a granule that only fits alone: chunk = one granule, even if not a multiple of 4
    CHECK(plan_chunks(3 * 51, 51, 100) == std::vector<uint64_t>{51, 51, 51});
    CHECK(plan_chunks(0, 4, 100).empty());
  }
  SUBCASE("errors") {
    CHECK_THROWS_AS(plan_chunks(100, 0, 100), greta::Error);
    CHECK_THROWS_WITH_AS(plan_chunks(1000, 200, 100), doctest::Contains("larger than the largest bindable range"),
                         greta::Error);
  }
  SUBCASE("random sizes: sum, granularity, limit") {
    std::mt19937_64 rng(7);
    for (int iter = 0; iter < 2000; ++iter) {
      const uint64_t granule = 1 + rng() % 5000;
      const uint64_t limit = granule + rng() % 100000;
      const uint64_t total = rng() % 1000000;
      const auto sizes = plan_chunks(total, granule, limit);
      CAPTURE(granule);
      CAPTURE(limit);
      CAPTURE(total);
      REQUIRE(std::accumulate(sizes.begin(), sizes.end(), uint64_t(0)) == total);
      for (size_t i = 0; i < sizes.size(); ++i) {
        REQUIRE(sizes[i] <= limit);
        REQUIRE(sizes[i] > 0);
        if (i + 1 < sizes.size()) {
          REQUIRE(sizes[i] == sizes[0]);
          REQUIRE(sizes[i] % granule == 0);
        }
      }
    }
  }
}

TEST_CASE_FIXTURE(VkFixture, "round trips from 1 byte to several staging chunks, odd sizes and offsets") {
  Transfer& t = xfer({4096, 2});  // small chunks: multi-chunk paths on small buffers
  const uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 63, 64, 65, 1000, 4095, 4096, 4097, 8191, 8192, 3 * 4096 + 17, 40001};
  const uint64_t offsets[] = {0, 1, 3, 17, 4093};
  uint32_t seed = 1;
  for (uint64_t size : sizes) {
    for (uint64_t offset : offsets) {
      CAPTURE(size);
      CAPTURE(offset);
      Buffer buffer = alloc().create_buffer(offset + size + 5, MemoryUse::device, "round trip");
      // Known surroundings: the bytes around the range must survive the upload.
      const auto background = random_bytes(buffer.size(), seed++);
      t.upload(buffer, 0, background.data(), background.size());
      const auto data = random_bytes(size, seed++);
      const uint64_t before = t.submissions();
      t.upload(buffer, offset, data.data(), size);
      CHECK(t.submissions() - before == (size + 4095) / 4096);
      std::vector<uint8_t> back(size);
      t.download(buffer, offset, back.data(), size);
      REQUIRE(back == data);
      std::vector<uint8_t> whole(buffer.size());
      t.download(buffer, 0, whole.data(), whole.size());
      auto expected = background;
      std::copy(data.begin(), data.end(), expected.begin() + ptrdiff_t(offset));
      REQUIRE(whole == expected);
    }
  }
}

TEST_CASE_FIXTURE(VkFixture, "transfers with one, three and default-size staging slots") {
  const auto data = random_bytes((1 << 20) + 3, 99);
  Buffer buffer = alloc().create_buffer(data.size(), MemoryUse::device, "slots");
  for (TransferOptions o : {TransferOptions{1000, 1}, TransferOptions{777, 3}, TransferOptions{}}) {
    CAPTURE(o.chunk_bytes);
    CAPTURE(o.slots);
    Transfer t(ctx(), alloc(), o);
    t.upload(buffer, 0, data.data(), data.size());
    std::vector<uint8_t> back(data.size());
    t.download(buffer, 0, back.data(), back.size());
    REQUIRE(back == data);
  }
}

TEST_CASE_FIXTURE(VkFixture, "buffers: spans are bounds-checked, staging buffers are mapped, bad sizes fail") {
  Buffer device = alloc().create_buffer(1000, MemoryUse::device, "spans");
  CHECK(device.mapped() == nullptr);
  CHECK(device.span(10, 990).size == 990);
  CHECK_THROWS_AS(device.span(10, 991), greta::Error);
  CHECK_THROWS_AS(device.span(1001, 0), greta::Error);
  CHECK_THROWS_AS(device.span(uint64_t(-1), 2), greta::Error);
  Buffer up = alloc().create_buffer(333, MemoryUse::upload, "up");
  Buffer down = alloc().create_buffer(333, MemoryUse::readback, "down");
  CHECK(up.mapped() != nullptr);
  CHECK(down.mapped() != nullptr);
  Buffer moved = std::move(up);
  CHECK(!up);
  CHECK(moved.size() == 333);
  CHECK_THROWS_WITH_AS(alloc().create_buffer(0, MemoryUse::device, "empty"), doctest::Contains("of 0 bytes"),
                       greta::Error);
  std::vector<uint8_t> bytes(10);
  CHECK_THROWS_AS(xfer().upload(device, 995, bytes.data(), bytes.size()), greta::Error);
  CHECK_THROWS_AS(xfer().download(device, 991, bytes.data(), bytes.size()), greta::Error);
}

TEST_CASE_FIXTURE(VkFixture, "out of memory and oversized requests are clear errors with the sizes") {
  const uint64_t absurd = uint64_t(1) << 50;  // 1 PiB
  SUBCASE("one buffer beyond the allocation limit") {
    CHECK_THROWS_WITH_AS(alloc().create_buffer(absurd, MemoryUse::device, "huge"),
                         doctest::Contains("cannot allocate buffer 'huge' of 1024.00 TiB"), greta::Error);
  }
  SUBCASE("a split buffer beyond the heap") {
    CHECK_THROWS_WITH_AS(alloc().create_split_buffer(absurd, 256, "weights"),
                         doctest::Contains("but the largest device-local heap has only"), greta::Error);
  }
  SUBCASE("a buffer within the allocation limit but beyond the heap") {
    ContextOptions o = test_options();
    ctx(o);
    const uint64_t heap = ctx().info().device_local_bytes();
    if (ctx().max_allocation_size() > heap) {
      CHECK_THROWS_WITH_AS(alloc().create_buffer(heap + 4096, MemoryUse::device, "big"),
                           doctest::Contains("but heap"), greta::Error);
    } else {
      MESSAGE("the allocation limit is below the heap size here; the heap check is unreachable");
    }
  }
}

// --device-memory-limit: device buffers count against the limit while they live; staging buffers do not.
TEST_CASE_FIXTURE(VkFixture, "a device memory limit refuses what would pass it, naming the device and the sizes") {
  alloc().set_device_limit(1 << 20);
  Buffer staging = alloc().create_buffer(3 << 20, MemoryUse::upload, "staging");  // not device memory
  std::optional<Buffer> first = alloc().create_buffer(600 << 10, MemoryUse::device, "first");
  CHECK(alloc().device_bytes_in_use() == (600 << 10));
  CHECK_THROWS_WITH_AS(alloc().create_buffer(600 << 10, MemoryUse::device, "second"),
                       doctest::Contains(greta::cat("allocating buffer 'second' on ", ctx().info().name,
                                                    ": requested 600.00 KiB, in use 600.00 KiB of the 1.00 MiB")
                                             .c_str()),
                       greta::Error);
  first.reset();
  CHECK(alloc().device_bytes_in_use() == 0);
  Buffer second = alloc().create_buffer(600 << 10, MemoryUse::device, "second");
  CHECK(alloc().device_bytes_in_use() == (600 << 10));
}

TEST_CASE_FIXTURE(VkFixture, "split buffers: chunks within forced small limits, round trips, spans, copies") {
  ContextOptions o = test_options();
  o.max_binding_range = 4096;      // pretend: one binding covers at most 4 KiB
  o.max_allocation_size = 1 << 20;
  ctx(o);
  REQUIRE(alloc().max_chunk_bytes() == 4096);
  const uint64_t row = 340;  // e.g. 85 f32 per row: chunks hold 12 rows = 4080 bytes
  const uint64_t rows = 37;
  SplitBuffer a = alloc().create_split_buffer(row * rows, row, "split a");
  SplitBuffer b = alloc().create_split_buffer(row * rows, row, "split b");
  REQUIRE(a.chunk_count() == 4);
  for (size_t i = 0; i < a.chunk_count(); ++i) {
    CHECK(a.chunk(i).size() <= 4096);
    CHECK(a.chunk(i).size() % row == 0);
    CHECK(a.chunk_offset(i) == i * 4080);
  }
  CHECK(a.chunk_of(4079) == 0);
  CHECK(a.chunk_of(4080) == 1);
  CHECK_THROWS_AS(a.chunk_of(a.size()), greta::Error);

  const auto data = random_bytes(a.size(), 5);
  xfer({1000, 2}).upload(a, 0, data.data(), data.size());
  std::vector<uint8_t> back(a.size());
  xfer().download(a, 0, back.data(), back.size());
  REQUIRE(back == data);
  // A range crossing chunk boundaries, at odd offsets.
  std::vector<uint8_t> part(5000);
  xfer().download(a, 3001, part.data(), part.size());
  CHECK(std::equal(part.begin(), part.end(), data.begin() + 3001));

  // Spans: inside one chunk fine, straddling refused.
  const BufferSpan s = a.span(4080 + 340, 680);
  CHECK(s.buffer == a.chunk(1).handle());
  CHECK(s.offset == 340);
  CHECK_THROWS_WITH_AS(a.span(4000, 200), doctest::Contains("straddles chunks 0 and 1"), greta::Error);
  const auto pieces = a.pieces(4000, 5000);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].second.size == 80);
  CHECK(pieces[1].second.size == 4080);
  CHECK(pieces[2].second.size == 840);

  // A kernel binds one chunk at a time: copy a -> b chunk by chunk with the copy shader.
  const auto& copy = pipes().get(ShaderId::copy_u32, {{0, 64}});
  RecordedSequence seq(ctx(), "split copy");
  seq.record([&](Recorder& r) {
    for (size_t i = 0; i < a.chunk_count(); ++i) {
      const uint32_t words = uint32_t(a.chunk(i).size() / 4);
      const uint32_t count = words;
      r.dispatch(copy, {a.chunk(i).span(), b.chunk(i).span()}, as_push(count), {group_count(words, 64, 65535), 1, 1});
    }
  });
  seq.run();
  xfer().download(b, 0, back.data(), back.size());
  CHECK(back == data);

  // Binding more than the (forced) range is refused when recording.
  Buffer big = alloc().create_buffer(8192, MemoryUse::device, "too big to bind");
  RecordedSequence bad(ctx(), "bad");
  const uint32_t count = 2048;
  CHECK_THROWS_WITH_AS(
      bad.record([&](Recorder& r) { r.dispatch(copy, {big.span(), big.span()}, as_push(count), {1, 1, 1}); }),
      doctest::Contains("more than the device's binding range"), greta::Error);
}

namespace {

// A temporary file of `bytes`, mapped read-only and private as GgufFile maps models; unmapped and removed at the end.
struct MappedFile {
  std::filesystem::path path;
  void* data = MAP_FAILED;
  size_t size = 0;
  explicit MappedFile(const std::vector<uint8_t>& bytes) : size(bytes.size()) {
    path = std::filesystem::temp_directory_path() / greta::cat("greta_import_test_", getpid());
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(size));
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    REQUIRE(data != MAP_FAILED);
  }
  ~MappedFile() {
    if (data != MAP_FAILED) ::munmap(data, size);
    std::filesystem::remove(path);
  }
  const uint8_t* at(uint64_t offset) const { return static_cast<const uint8_t*>(data) + offset; }
};

}  // namespace

// lavapipe has VK_EXT_external_memory_host on unified memory, so CI runs this; elsewhere it says why it did not.
TEST_CASE_FIXTURE(VkFixture, "imported host memory: a read-only file mapping used in place by transfers and kernels") {
  if (!ctx().features().external_memory_host) {
    MESSAGE("no VK_EXT_external_memory_host on unified memory on ", ctx().info().name, ": not run");
    return;
  }
  const uint64_t page = ctx().info().min_imported_host_pointer_alignment;
  const auto bytes = random_bytes(3 * page + 1000, 11);
  const MappedFile file(bytes);
  const auto& copy = pipes().get(ShaderId::copy_u32, {{0, 64}});
  for (uint64_t offset : {uint64_t(0), uint64_t(48), page + 16, 2 * page - 64}) {
    for (uint64_t size : {uint64_t(4), uint64_t(1000), page + 100}) {
      CAPTURE(offset);
      CAPTURE(size);
      Buffer b = alloc().import_host_memory(file.at(offset), size, "imported");
      REQUIRE(b);
      CHECK(b.imported());
      CHECK(b.mapped() == nullptr);
      CHECK(b.span().offset == offset % page);
      CHECK(alloc().device_bytes_in_use() == size);
      std::vector<uint8_t> back(size);
      xfer().download(b, 0, back.data(), size);
      REQUIRE(std::equal(back.begin(), back.end(), bytes.begin() + ptrdiff_t(offset)));
      // A kernel binds it (a descriptor at the in-page offset): copy it into a device buffer.
      Buffer out = alloc().create_buffer(size, MemoryUse::device, "copy of imported");
      const uint32_t words = uint32_t(size / 4);
      RecordedSequence seq(ctx(), "imported copy");
      seq.record([&](Recorder& r) {
        r.dispatch(copy, {b.span(), out.span()}, as_push(words), {group_count(words, 64, 65535), 1, 1});
      });
      seq.run();
      std::fill(back.begin(), back.end(), 0);
      xfer().download(out, 0, back.data(), size);
      REQUIRE(std::equal(back.begin(), back.end(), bytes.begin() + ptrdiff_t(offset)));
    }
  }
  CHECK(alloc().device_bytes_in_use() == 0);
  // A start the descriptors cannot bind, or not at 16 bytes (kernels read weights in 16-byte words), is left to the
  // caller (who copies).
  CHECK(!alloc().import_host_memory(file.at(8), 64, "odd"));
  // The device memory limit counts imported bytes.
  alloc().set_device_limit(page);
  CHECK_THROWS_WITH_AS(alloc().import_host_memory(file.at(0), page + 4, "over"),
                       doctest::Contains("the device memory limit allows"), greta::Error);
}

TEST_CASE_FIXTURE(VkFixture, "imported split buffers: chunks of whole rows, each imported from its own pages") {
  ContextOptions o = test_options();
  o.max_binding_range = 3 * 4096;  // chunks of at most one page after the two pages of rounding: several chunks
  ctx(o);
  if (!ctx().features().external_memory_host || ctx().info().min_imported_host_pointer_alignment != 4096) {
    MESSAGE("no VK_EXT_external_memory_host with 4 KiB pages here: not run");
    return;
  }
  const uint64_t row = 340, rows = 37;
  const auto bytes = random_bytes(row * rows + 96, 12);
  const MappedFile file(bytes);
  const SplitBuffer a = alloc().import_split_buffer(file.at(32), row * rows, row, "imported split");
  REQUIRE(a.size() == row * rows);
  REQUIRE(a.chunk_count() == 4);  // 12 rows (4080 bytes) per chunk
  for (size_t i = 0; i < a.chunk_count(); ++i) CHECK(a.chunk(i).imported());
  std::vector<uint8_t> back(a.size());
  xfer().download(a, 0, back.data(), back.size());
  CHECK(std::equal(back.begin(), back.end(), bytes.begin() + 32));
  // A chunk that would start at a start the descriptors cannot bind: nothing is imported.
  CHECK(alloc().import_split_buffer(file.at(4), row * rows, row, "odd").size() == 0);
  CHECK(alloc().device_bytes_in_use() == a.size());
}
