// vk_copy_bench: device-local buffer-to-buffer copy bandwidth, counting bytes read + written.
//   method "shader_u32x4": the copy_u32x4 compute shader (16-byte loads/stores), binding windows of at most
//                          maxStorageBufferRange;
//   method "vkCmdCopyBuffer": the transfer command on the compute queue.
// Every method is validated first (destination cleared, copied, downloaded and compared with the source), then timed
// with GPU timestamps after warm-up; the table shows the median and the minimum.
#include <cstdio>
#include <cstring>
#include <functional>

#include "bench_common.h"
#include "core/error.h"
#include "vk/memory.h"
#include "vk/pipelines.h"
#include "vk/transfer.h"

using namespace greta;
using namespace greta::bench;

namespace {

int run(int argc, char** argv) {
  BenchOptions options;
  if (!parse_options(argc, argv, "vk_copy_bench", "Device-local copy bandwidth (GB/s = (read + write) / time).",
                     "1,16,64,256", options))
    return 0;
  auto ctx = open_context(options);
  vk::Allocator alloc(*ctx);
  vk::Pipelines pipelines(*ctx);
  vk::Transfer transfer(*ctx, alloc);
  const auto& copy = copy_pipeline(pipelines);
  std::vector<Row> rows;
  std::vector<std::string> notes;
  const uint64_t heap = ctx->info().device_local_bytes();

  for (uint64_t bytes : options.sizes) {
    if (bytes > ctx->max_allocation_size() || 2 * bytes > heap / 10 * 8) {
      notes.push_back(cat("skipped ", format_bytes(double(bytes)), ": two buffers do not fit the device's limits"));
      continue;
    }
    vk::Buffer src = alloc.create_buffer(bytes, vk::MemoryUse::device, "bench src");
    vk::Buffer dst = alloc.create_buffer(bytes, vk::MemoryUse::device, "bench dst");
    const auto data = pattern_words(bytes / 4, bytes);
    transfer.upload(src, data);

    struct Method {
      const char* name;
      std::function<void(vk::Recorder&)> record;
    };
    const Method methods[] = {
        {"shader_u32x4", [&](vk::Recorder& r) { record_shader_copy(r, *ctx, copy, src, dst, bytes); }},
        {"vkCmdCopyBuffer", [&](vk::Recorder& r) { r.copy(src.span(), dst.span(), "vkCmdCopyBuffer"); }},
    };
    for (const Method& m : methods) {
      // Validate: clear the destination, copy once, compare.
      vk::RecordedSequence clear(*ctx, "clear");
      clear.record([&](vk::Recorder& r) { r.fill(dst.span(), 0xcdcdcdcdu); });
      clear.run();
      vk::RecordedSequence seq(*ctx, m.name, {true});
      seq.record(m.record);
      seq.run();
      std::vector<uint32_t> back(data.size());
      transfer.download(dst, 0, back.data(), bytes);
      if (std::memcmp(back.data(), data.data(), bytes) != 0)
        fail(m.name, " produced a wrong copy of ", format_bytes(double(bytes)), "; not timing it");
      Row row;
      row.method = m.name;
      row.bytes = bytes;
      row.moved_bytes = 2 * bytes;
      row.timing = measure(seq, options);
      rows.push_back(row);
    }
  }
  print_results("vk_copy_bench", *ctx, options, rows, notes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_copy_bench", run, argc, argv); }
