// vk_fill_bench: device-local fill bandwidth, counting bytes written.
//   method "shader_fill_u32": the fill_u32 compute shader (one 32-bit store per element, grid-stride), binding
//                             windows of at most maxStorageBufferRange;
//   method "vkCmdFillBuffer": the transfer command on the compute queue.
// Each method is validated first (buffer pre-set to another value, filled, downloaded, checked), then timed with GPU
// timestamps after warm-up.
#include <algorithm>
#include <cstdio>
#include <functional>

#include "bench_common.h"
#include "core/error.h"
#include "vk/memory.h"
#include "vk/pipelines.h"
#include "vk/transfer.h"

using namespace greta;
using namespace greta::bench;

namespace {

constexpr uint32_t k_local_size = 256;

struct FillPush {
  uint32_t count;
  uint32_t value;
};

int run(int argc, char** argv) {
  BenchOptions options;
  if (!parse_options(argc, argv, "vk_fill_bench", "Device-local fill bandwidth (GB/s = bytes written / time).",
                     "1,16,64,256", options))
    return 0;
  auto ctx = open_context(options);
  vk::Allocator alloc(*ctx);
  vk::Pipelines pipelines(*ctx);
  vk::Transfer transfer(*ctx, alloc);
  const auto& fill = pipelines.get(vk::ShaderId::fill_u32, {{0, k_local_size}});
  std::vector<Row> rows;
  std::vector<std::string> notes;
  const uint64_t heap = ctx->info().device_local_bytes();
  const uint64_t window = ctx->max_binding_range() / 256 * 256;

  for (uint64_t bytes : options.sizes) {
    if (bytes > ctx->max_allocation_size() || bytes > heap / 10 * 8) {
      notes.push_back(cat("skipped ", format_bytes(double(bytes)), ": the buffer does not fit the device's limits"));
      continue;
    }
    vk::Buffer dst = alloc.create_buffer(bytes, vk::MemoryUse::device, "bench fill");
    uint32_t value = 0x12345678u;
    struct Method {
      const char* name;
      std::function<void(vk::Recorder&)> record;
    };
    const Method methods[] = {
        {"shader_fill_u32",
         [&](vk::Recorder& r) {
           for (uint64_t offset = 0; offset < bytes; offset += window) {
             const uint64_t n = std::min(window, bytes - offset);
             const FillPush push{uint32_t(n / 4), value};
             r.dispatch(fill, {dst.span(offset, n)}, vk::as_push(push),
                        {vk::group_count(n / 4, k_local_size, ctx->info().max_workgroup_count[0]), 1, 1}, "fill window");
           }
         }},
        {"vkCmdFillBuffer", [&](vk::Recorder& r) { r.fill(dst.span(), value, "vkCmdFillBuffer"); }},
    };
    for (const Method& m : methods) {
      ++value;
      vk::RecordedSequence clear(*ctx, "clear");
      clear.record([&](vk::Recorder& r) { r.fill(dst.span(), ~value); });
      clear.run();
      vk::RecordedSequence seq(*ctx, m.name, {true});
      seq.record(m.record);
      seq.run();
      const auto back = transfer.download<uint32_t>(dst, bytes / 4);
      if (!std::all_of(back.begin(), back.end(), [&](uint32_t w) { return w == value; }))
        fail(m.name, " left wrong values in a fill of ", format_bytes(double(bytes)), "; not timing it");
      Row row;
      row.method = m.name;
      row.bytes = bytes;
      row.moved_bytes = bytes;
      row.timing = measure(seq, options);
      rows.push_back(row);
    }
  }
  print_results("vk_fill_bench", *ctx, options, rows, notes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_fill_bench", run, argc, argv); }
