#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace greta::bench {

namespace {

constexpr uint32_t k_copy_local_size = 256;

const cli::OptionSpec k_shared_options[] = {
    {"device", "d", true, "Vulkan device index (default: first discrete GPU, else integrated, else CPU)"},
    {"json", nullptr, false, "print JSON instead of a table"},
    {"iters", "n", true, "timed iterations per case (default 20)"},
    {"warmup", nullptr, true, "untimed iterations first (default 3)"},
    {"validation", nullptr, false, "enable the Vulkan validation layer"},
};

const cli::OptionSpec k_options[] = {
    k_shared_options[0], k_shared_options[1], {"sizes", "s", true, "comma-separated buffer sizes in MiB"},
    k_shared_options[2], k_shared_options[3], k_shared_options[4],
    {"quick", "q", false, "one small size (1 MiB) and few iterations, as every kernel bench takes it"},
    {"help", "h", false, "show this help"},
};

}  // namespace

std::span<const cli::OptionSpec> shared_option_specs() { return k_shared_options; }

void read_shared_options(const cli::Args& args, BenchOptions& out) {
  out.device = int(args.get_int("device", -1));
  out.json = args.has("json");
  out.validation = args.has("validation");
  out.iterations = int(args.get_int("iters", 20));
  out.warmup = int(args.get_int("warmup", 3));
  if (out.iterations < 1 || out.iterations > 100000) fail("--iters must be 1..100000");
  if (out.warmup < 0 || out.warmup > 100000) fail("--warmup must be 0..100000");
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

bool parse_options(int argc, char** argv, const char* name, const char* what, const char* default_sizes_mib,
                   BenchOptions& out) {
  cli::Args args(argc - 1, argv + 1, k_options);
  if (args.has("help")) {
    std::printf("usage: %s [options]\n%s\n\n%s", name, what, cli::usage_options(k_options).c_str());
    return false;
  }
  args.expect_positional(0, 0, cat(name, " [--device N] [--json] [--sizes MIB,...] [--iters N]"));
  read_shared_options(args, out);
  const bool quick = args.has("quick");
  if (quick && !args.has("iters")) out.iterations = 3;
  if (quick && !args.has("warmup")) out.warmup = 1;
  std::stringstream list(args.get("sizes", quick ? "1" : default_sizes_mib));
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const double mib = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || !(mib > 0) || mib > 1 << 20) fail("--sizes: bad size '", item, "'");
    out.sizes.push_back(std::max<uint64_t>(16, uint64_t(mib * 1048576.0) / 16 * 16));
  }
  if (out.sizes.empty()) fail("--sizes: no sizes given");
  return true;
}

std::unique_ptr<vk::Context> open_context(const BenchOptions& options) {
  vk::ContextOptions co;
  co.instance.validation = options.validation;
  return vk::Context::create(options.device, co);
}

Timing measure(vk::RecordedSequence& seq, const BenchOptions& options) {
  for (int i = 0; i < options.warmup; ++i) seq.submit();
  seq.wait();
  std::vector<double> times;
  Timing t;
  t.gpu_timer = seq.profiling();
  for (int i = 0; i < options.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    seq.run();
    if (t.gpu_timer) {
      const auto timings = seq.timings();
      double first = timings.front().start_ns, last = 0;
      for (const auto& x : timings) {
        first = std::min(first, x.start_ns);
        last = std::max(last, x.end_ns);
      }
      times.push_back(last - first);
    } else {
      times.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::sort(times.begin(), times.end());
  t.min_ns = times.front();
  t.median_ns = times[times.size() / 2];
  return t;
}

const vk::ComputePipeline& copy_pipeline(vk::Pipelines& pipelines) {
  return pipelines.get(vk::ShaderId::copy_u32x4, {{0, k_copy_local_size}});
}

void record_shader_copy(vk::Recorder& r, const vk::Context& ctx, const vk::ComputePipeline& copy, const vk::Buffer& src,
                        const vk::Buffer& dst, uint64_t bytes) {
  const uint64_t window = ctx.max_binding_range() / 256 * 256;  // keeps window offsets aligned for any device
  for (uint64_t offset = 0; offset < bytes; offset += window) {
    const uint64_t n = std::min(window, bytes - offset);
    const uint32_t count = uint32_t(n / 16);
    r.dispatch(copy, {src.span(offset, n), dst.span(offset, n)}, vk::as_push(count),
               {vk::group_count(count, k_copy_local_size, ctx.info().max_workgroup_count[0]), 1, 1}, "copy window");
  }
}

Row measure_shader_copy(vk::Context& ctx, uint64_t bytes, const BenchOptions& options) {
  vk::Allocator alloc(ctx);
  vk::Pipelines pipelines(ctx);
  const auto& copy = copy_pipeline(pipelines);
  vk::Buffer src = alloc.create_buffer(bytes, vk::MemoryUse::device, "copy src");
  vk::Buffer dst = alloc.create_buffer(bytes, vk::MemoryUse::device, "copy dst");
  vk::RecordedSequence seq(ctx, "shader copy", {true});
  seq.record([&](vk::Recorder& r) {
    r.fill(src.span(), 0x3f800000u);
    r.barrier();
    record_shader_copy(r, ctx, copy, src, dst, bytes);
  });
  seq.run();  // also fills the source once; the timed runs copy it again
  seq.record([&](vk::Recorder& r) { record_shader_copy(r, ctx, copy, src, dst, bytes); });
  Row row;
  row.method = "shader_u32x4";
  row.bytes = bytes;
  row.moved_bytes = 2 * bytes;
  row.timing = measure(seq, options);
  return row;
}

void print_results(const std::string& bench, const vk::Context& context, const BenchOptions& options,
                   const std::vector<Row>& rows, const std::vector<std::string>& notes) {
  const vk::DeviceInfo& info = context.info();
  if (options.json) {
    std::printf("{\"bench\": \"%s\", \"device\": \"%s\", \"device_index\": %u, \"driver\": \"%s\", \"iterations\": %d, "
                "\"warmup\": %d, \"results\": [",
                bench.c_str(), json_escape(info.name).c_str(), info.index,
                json_escape(info.driver_name + " " + info.driver_info).c_str(), options.iterations, options.warmup);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("%s\n  {\"method\": \"%s\", \"bytes\": %llu, \"moved_bytes\": %llu, \"median_ms\": %.6f, "
                  "\"min_ms\": %.6f, \"gbps\": %.3f, \"timer\": \"%s\"}",
                  i ? "," : "", r.method.c_str(), static_cast<unsigned long long>(r.bytes),
                  static_cast<unsigned long long>(r.moved_bytes), r.timing.median_ns / 1e6, r.timing.min_ns / 1e6,
                  r.gbps(), r.timing.gpu_timer ? "gpu" : "wall");
    }
    std::printf("],\n \"notes\": [");
    for (size_t i = 0; i < notes.size(); ++i) std::printf("%s\"%s\"", i ? ", " : "", json_escape(notes[i]).c_str());
    std::printf("]}\n");
    return;
  }
  std::printf("%s on [%u] %s (%s %s), %d iterations after %d warm-up\n", bench.c_str(), info.index, info.name.c_str(),
              info.driver_name.c_str(), info.driver_info.c_str(), options.iterations, options.warmup);
  std::printf("%-20s %12s %12s %12s %10s %6s\n", "method", "size", "median ms", "min ms", "GB/s", "timer");
  for (const Row& r : rows)
    std::printf("%-20s %12s %12.4f %12.4f %10.2f %6s\n", r.method.c_str(), format_bytes(double(r.bytes)).c_str(),
                r.timing.median_ns / 1e6, r.timing.min_ns / 1e6, r.gbps(), r.timing.gpu_timer ? "gpu" : "wall");
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
}

std::vector<int64_t> parse_ints(const std::string& list, const char* option) {
  std::vector<int64_t> out;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || v <= 0 || v > (int64_t(1) << 31))
      fail("--", option, ": bad number '", item, "'");
    out.push_back(v);
  }
  if (out.empty()) fail("--", option, ": nothing given");
  return out;
}

std::vector<std::vector<int64_t>> parse_shapes(const std::string& list, size_t dims, const char* option) {
  std::vector<std::vector<int64_t>> out;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    std::replace(item.begin(), item.end(), 'x', ',');
    out.push_back(parse_ints(item, option));
    if (out.back().size() != dims) fail("--", option, ": '", list, "' needs ", dims, " numbers per shape (AxB...)");
  }
  if (out.empty()) fail("--", option, ": no shapes given");
  return out;
}

std::string shape_name(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) {
    if (!s.empty()) s += 'x';
    s += std::to_string(d);
  }
  return s;
}

std::vector<uint32_t> pattern_words(size_t count, uint64_t seed) {
  std::vector<uint32_t> v(count);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& w : v) {  // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w = uint32_t((x * 0x2545f4914f6cdd1dull) >> 32);
  }
  return v;
}

int bench_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace greta::bench
