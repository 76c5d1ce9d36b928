// RMSNorm (also qwen3's per-head Q/K norm): one workgroup per row, its sum of squares reduced per subgroup then
// across subgroups (rmsnorm.comp). H200, 8B at 16 sequences: 11.0 us per norm with a shared-memory tree (the step's
// trace), 6.3 with subgroup sums (vk_rmsnorm_bench 16x4096); the step's norms 0.71 -> 0.40 ms.
#include <algorithm>
#include <bit>

#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_rmsnorm(OpEncoder& e, const engine::RmsNormOp& op, bool f16_out, bool q8_out) {
  const DeviceWeight& w = e.weight(op.weight);
  GRETA_CHECK(w.rows == 1 && w.cols == op.width, w.name);
  // The input's split-K partials when the backend handed them to the norm (OpEncoder::take_split_sum).
  const OpEncoder::SplitPartials parts = e.take_split_sum(op.in);
  const BufferSpan in = e.buffer(op.in);
  const struct { uint32_t in_row_offset, rows, width; float eps; uint32_t parts, part_stride; } push{
      to_u32(op.in_row_offset, "row offset"), to_u32(op.rows, "rows"), to_u32(op.width, "width"), op.eps,
      parts.count, parts.stride};
  // One workgroup per row: 64 invocations for head-width rows (qwen3's Q/K norm over head_dim = 64..128), 256 for
  // model-width rows, and for a decode step (up to 64 rows: one token per sequence) one vec4 per invocation, up to
  // 1024, where the few workgroups' latency is the whole cost; the more so when the norm adds a split GEMM's partials
  // (five reads per element at 4 splits). H200, 8B, the step's norms at 16 / 64 sequences: 0.55 / 0.51 ms on 256
  // invocations, 0.40 / 0.39 on 1024 (S_TG +1.4 / +0.5 %).
  uint32_t local = op.width >= 1024 ? 256 : 64;
  if (op.rows <= 64 && op.width >= 1024)  // the reduction needs a power of two
    local = std::bit_floor(std::min<uint32_t>(std::min<uint32_t>(1024, e.info().max_workgroup_invocations),
                                              std::max<uint32_t>(256, uint32_t(op.width / 4))));
  // With f16_out the norm also writes the f16 copy the cooperative-matrix GEMMs after it read (f16_target), with
  // q8_out the int8 copy the int8 GEMMs read (q8_target; 8 invocations per 32-element block).
  GRETA_CHECK(!f16_out || op.width % 4 == 0, "f16 rmsnorm output of width ", op.width);
  GRETA_CHECK(!q8_out || (op.width % 32 == 0 && local % 8 == 0 && e.info().subgroup_size >= 8),
              "int8 rmsnorm output of width ", op.width);
  const BufferSpan out = e.buffer(op.out);
  const BufferSpan out16 = f16_out ? e.f16_target(op.out, uint64_t(op.rows), uint64_t(op.width)) : out;
  const BufferSpan q8 = q8_out ? e.q8_target(Q8Source{.x = op.out, .rows = op.rows, .cols = op.width}) : out;
  PipelineOptions options;
  if (q8_out) options.full_subgroups = e.info().compute_full_subgroups;
  const auto& p = e.pipeline(ShaderId::rmsnorm_f32, {{0, local}, {1, f16_out}, {2, q8_out}}, options);
  e.dispatch(p, {in, w.vector.span(), out, out16, parts.count ? parts.partials : in, q8}, as_push(push),
             {std::min<uint32_t>(push.rows, e.info().max_workgroup_count[0]), 1, 1});
  e.note_variant(cat("rmsnorm_f32", f16_out ? " (and its f16 copy for the GEMMs)" : "",
                     q8_out ? " (and its int8 copy for the GEMMs)" : ""));
  if (parts.count) e.note_variant("adds its input's split-K partials");
}

}  // namespace greta::vk
