// vk_alu_bench: the device's issue rate for the arithmetic the decode kernels are built from (shaders/alu_rate.comp):
// packed int8 dot products (dotPacked4x8EXT, the int8 matvecs), int32 multiply-adds, f32 and packed-f16 fused
// multiply-adds, and int-to-float conversions. A kernel lab measurement: where a kernel's cost grows with work that
// is "one instruction" in GLSL, this says what that instruction costs on the device (a driver may expand one).
// Each kind is validated first (a sample of invocations replayed on the CPU, bit for bit; packed f16 against
// the fixed point its chains converge to),
// then timed with GPU timestamps; G instr/s counts the GLSL operations, and MAC/s the multiply-adds they carry.
// Then a residency table: how many workgroups of each size and shared-memory footprint the device runs at once.
#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <cstdio>

#include "bench_common.h"
#include "core/error.h"
#include "vk/memory.h"
#include "vk/pipelines.h"
#include "vk/transfer.h"

using namespace greta;
using namespace greta::bench;

namespace {

constexpr uint32_t k_local_size = 256;  // alu_rate.comp's workgroup
constexpr uint32_t k_chains = 8;        // alu_rate.comp's CHAINS

enum class Op : uint32_t { dp4a, imad, ffma, hfma2, i2f };
struct OpInfo {
  Op op;
  const char* name;
  int macs;  // multiply-adds per operation
};
constexpr OpInfo k_ops[] = {{Op::dp4a, "dotPacked4x8EXT", 4},
                            {Op::imad, "int32 mul+add", 1},
                            {Op::ffma, "f32 fma", 1},
                            {Op::hfma2, "f16vec2 fma", 2},
                            {Op::i2f, "int->float", 0}};

// One step of a chain, as the shader does it (packed f16 is checked against its fixed point instead).
uint32_t step(Op op, uint32_t acc, uint32_t m, uint32_t c) {
  switch (op) {
    case Op::dp4a: {
      int32_t dot = 0;
      for (int i = 0; i < 4; ++i) dot += int32_t(int8_t(acc >> (8 * i))) * int32_t(int8_t(m >> (8 * i)));
      return uint32_t(dot) + acc;
    }
    case Op::imad: return acc * m + c;
    case Op::ffma: return std::bit_cast<uint32_t>(std::fma(std::bit_cast<float>(acc), std::bit_cast<float>(m),
                                                           std::bit_cast<float>(c)));
    case Op::i2f: return std::bit_cast<uint32_t>(float(int32_t(acc)));
    case Op::hfma2: break;
  }
  fail("vk_alu_bench: no CPU step for this operation");
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Residency (shaders/residency_probe.comp): the most workgroups of each size and shared-memory footprint the device
// ran at once, out of a grid far larger than it can hold; divided by the device's multiprocessor count, this is the
// occupancy a kernel of that footprint can have at most (registers aside), which explains tile choices.
void residency(vk::Context& ctx, vk::Allocator& alloc, vk::Pipelines& pipelines, vk::Transfer& transfer) {
  if (!vk::shader_available(vk::ShaderId::residency_probe)) return;
  // A CPU device (lavapipe, CI) runs a workgroup per thread: a small grid and short chains say as much there.
  const bool cpu = ctx.info().type == VK_PHYSICAL_DEVICE_TYPE_CPU;
  const uint32_t max_shared = ctx.info().max_shared_memory, groups = cpu ? 64 : 16384, steps = cpu ? 16 : 1024;
  vk::Buffer counters = alloc.create_buffer(16, vk::MemoryUse::device, "residency counters");
  vk::Buffer out = alloc.create_buffer(uint64_t(groups) * 256 * 4, vk::MemoryUse::device, "residency results");
  std::printf("\nworkgroups resident at once (of %u; a chain of %u steps each), by workgroup size and shared memory\n",
              groups, steps);
  const uint32_t kib[] = {1, 8, 12, 16, 20, 24, 28, 32, 40, 48};
  std::printf("%-10s", "KiB");
  for (uint32_t k : kib) std::printf(" %7u", k);
  std::printf("\n");
  for (uint32_t local : {32u, 64u, 128u, 256u}) {
    std::printf("%-10u", local);
    for (uint32_t k : kib) {
      if (k * 1024 > max_shared) {
        std::printf(" %7s", "-");
        continue;
      }
      transfer.upload(counters, std::vector<uint32_t>(4, 0u));
      const auto& pipeline = pipelines.get(vk::ShaderId::residency_probe, {{0, local}, {1, k * 256}});
      vk::RecordedSequence seq(ctx, "residency", {false});
      seq.record([&](vk::Recorder& r) {
        r.dispatch(pipeline, {counters.span(), out.span()}, vk::as_push(steps), {groups, 1, 1}, "residency");
      });
      seq.run();
      const auto count = transfer.download<uint32_t>(counters, 2);
      if (count[0] != 0 || count[1] == 0 || count[1] > groups)
        fail("vk_alu_bench: the residency probe counted ", count[0], " workgroups still in and ", count[1],
             " at most of ", groups, "; not reporting it");
      std::printf(" %7u", count[1]);
    }
    std::printf("\n");
  }
}

int run(int argc, char** argv) {
  BenchOptions options;
  if (!parse_options(argc, argv, "vk_alu_bench",
                     "Issue rate of int8 dot products, int32/f32/f16 multiply-adds and int-to-float conversions.",
                     "32", options))
    return 0;
  auto ctx = open_context(options);
  vk::Allocator alloc(*ctx);
  vk::Pipelines pipelines(*ctx);
  vk::Transfer transfer(*ctx, alloc);
  // The grid: one invocation per 4 bytes of --sizes (the first size), like the bandwidth benches' buffers.
  const uint64_t requested = options.sizes.empty() ? 0 : options.sizes[0] / 4 / k_local_size * k_local_size;
  const uint32_t invocations = uint32_t(std::clamp<uint64_t>(
      requested, k_local_size, uint64_t(ctx->info().max_workgroup_count[0]) * k_local_size));
  const uint32_t iterations = 128;
  const uint32_t groups = invocations / k_local_size;

  // Seeds: chain starts, then m and c per kind (small f32 / f16 values that keep the chains finite).
  std::vector<uint32_t> seeds(k_chains + 2);
  for (uint32_t i = 0; i < k_chains; ++i) seeds[i] = 0x9E3779B9u * (i + 1) ^ 0x5bd1e995u;
  vk::Buffer seed_buf = alloc.create_buffer(seeds.size() * 4, vk::MemoryUse::device, "alu seeds");
  vk::Buffer out_buf = alloc.create_buffer(uint64_t(invocations) * 4, vk::MemoryUse::device, "alu results");

  std::printf("vk_alu_bench: %s, %u invocations x %u chains x %u steps\n", ctx->info().name.c_str(), invocations,
              k_chains, iterations);
  std::printf("%-18s %12s %14s %14s\n", "operation", "median us", "G ops/s", "G MAC/s");
  for (const OpInfo& info : k_ops) {
    const bool needs_intdot = info.op == Op::dp4a, needs_f16 = info.op == Op::hfma2;
    if (!vk::shader_available(vk::ShaderId::alu_rate) || (needs_intdot && !ctx->features().integer_dot_product) ||
        (needs_f16 && !ctx->features().shader_float16)) {
      std::printf("%-18s %12s\n", info.name, "(not on this device)");
      continue;
    }
    // Per kind: chain starts that keep floats finite (f32 in [1, 2), f16 pairs in [0.5, 1)), m and c.
    std::vector<uint32_t> s = seeds;
    if (info.op == Op::ffma) {
      for (uint32_t i = 0; i < k_chains; ++i) s[i] = 0x3F800000u | (s[i] & 0x007FFFFFu);
      s[k_chains] = std::bit_cast<uint32_t>(0.5f), s[k_chains + 1] = std::bit_cast<uint32_t>(0.75f);
    } else if (info.op == Op::hfma2) {
      for (uint32_t i = 0; i < k_chains; ++i) s[i] = 0x38003800u | (s[i] & 0x03FF03FFu);
      s[k_chains] = 0x38003800u, s[k_chains + 1] = 0x3A003A00u;  // m = 0.5, c = 0.75 in both halves
    } else if (info.op == Op::i2f) {
      for (uint32_t i = 0; i < k_chains; ++i) s[i] &= 0xFFFFu;
    } else {
      s[k_chains] = 0x03FD0507u, s[k_chains + 1] = 0x1234567u;
    }
    transfer.upload(seed_buf, s);
    const auto& pipeline = pipelines.get(vk::ShaderId::alu_rate, {{0, uint32_t(info.op)}});
    vk::RecordedSequence seq(*ctx, info.name, {true});
    seq.record([&](vk::Recorder& r) {
      r.dispatch(pipeline, {seed_buf.span(), out_buf.span()}, vk::as_push(iterations), {groups, 1, 1}, info.name);
    });
    seq.run();
    const auto back = transfer.download<uint32_t>(out_buf, invocations);
    for (uint32_t gid = 0; gid < invocations; gid += invocations / 64) {
      // f16 chains converge to c / (1 - m) = 1.5 (0x3E00) in both halves well within 16 steps.
      uint32_t expect = 0;
      for (uint32_t i = 0; i < k_chains; ++i) {
        uint32_t acc = s[i] ^ gid;
        for (uint32_t it = 0; it < iterations; ++it)
          acc = info.op == Op::hfma2 ? 0x3E003E00u : step(info.op, acc, s[k_chains], s[k_chains + 1]);
        expect += acc;
      }
      if (back[gid] != expect)
        fail("vk_alu_bench: ", info.name, " gave ", hex(back[gid]), " at invocation ", gid, ", the CPU ",
             hex(expect), "; not timing it");
    }
    const Timing t = measure(seq, options);
    const double ops = double(invocations) * k_chains * iterations;
    std::printf("%-18s %12.1f %14.1f %14.1f\n", info.name, t.median_ns / 1e3, ops / t.median_ns,
                ops * info.macs / t.median_ns);
  }
  residency(*ctx, alloc, pipelines, transfer);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench_main("vk_alu_bench", run, argc, argv); }
