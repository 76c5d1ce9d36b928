// The elementwise ops: gated linear units (every GluKind, glu.comp), residual add, bias add. Grid-stride kernels over
// the flattened elements.
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_glu(OpEncoder& e, const engine::GluOp& op, std::optional<GemmRows> f16_out,
                std::optional<GemmRows> q8_out) {
  // The inputs' split-K partials when the backend handed them to the GLU (OpEncoder::take_split_sum).
  const OpEncoder::SplitPartials gate_parts = e.take_split_sum(op.gate), up_parts = e.take_split_sum(op.up);
  const struct {
    uint32_t count;
    float alpha, limit;  // SwiGluOai only
    uint32_t gate_parts, gate_stride, up_parts, up_stride, keep_gate, keep_up, cols;
  } push{to_u32(op.elems, "glu elements"), op.alpha, op.limit, gate_parts.count, gate_parts.stride,
         up_parts.count, up_parts.stride, op.out != op.gate, op.out != op.up,
         q8_out ? to_u32(int64_t(q8_out->cols), "glu columns") : 0u};
  const uint32_t kind = uint32_t(op.kind);  // glu.comp's KIND: GluKind's order
  GRETA_CHECK(!f16_out || (f16_out->rows * f16_out->cols == uint64_t(op.elems) && op.elems % 4 == 0),
              "f16 glu output of ", op.elems, " values");
  GRETA_CHECK(!q8_out || (q8_out->rows * q8_out->cols == uint64_t(op.elems) && q8_out->cols % 32 == 0 &&
                          e.info().subgroup_size >= 8),
              "int8 glu output of ", op.elems, " values");
  // The f16- and int8-output path reads the partials as vec4 (glu.comp): the GEMMs' strides are multiples of 64
  // floats.
  GRETA_CHECK((!f16_out && !q8_out) || (gate_parts.stride % 4 == 0 && up_parts.stride % 4 == 0), "glu partial strides ",
              gate_parts.stride, " / ", up_parts.stride);
  // With f16_out the GLU also writes the f16 copy the cooperative-matrix GEMM after it reads (f16_target), with
  // q8_out the int8 copy the int8 GEMM reads (glu_f32_q8, q8_target; 8 invocations per 32-element block).
  const BufferSpan out = e.buffer(op.out);
  const BufferSpan out16 = f16_out ? e.f16_target(op.out, f16_out->rows, f16_out->cols) : out;
  const BufferSpan gate = e.buffer(op.gate), up = e.buffer(op.up);
  const BufferSpan gate_in = gate_parts.count ? gate_parts.partials : gate;
  const BufferSpan up_in = up_parts.count ? up_parts.partials : up;
  PipelineOptions options;
  if (q8_out) options.full_subgroups = e.info().compute_full_subgroups;
  const auto& p = e.pipeline(q8_out ? ShaderId::glu_f32_q8 : ShaderId::glu_f32,
                             {{0, kElementwiseWorkgroup}, {1, kind}, {2, f16_out.has_value()}}, options);
  const std::array<uint32_t, 3> groups{
      e.groups_for(f16_out || q8_out ? push.count / 4 : push.count, kElementwiseWorkgroup), 1, 1};
  if (q8_out) {
    const BufferSpan q8 =
        e.q8_target(Q8Source{.x = op.out, .rows = int64_t(q8_out->rows), .cols = int64_t(q8_out->cols)});
    e.dispatch(p, {gate, up, out, out16, gate_in, up_in, q8}, as_push(push), groups);
  } else {
    e.dispatch(p, {gate, up, out, out16, gate_in, up_in}, as_push(push), groups);
  }
  e.note_variant(cat("glu_f32", q8_out ? "_q8" : "", " (", engine::glu_kind_name(op.kind), ")",
                     f16_out ? " and its f16 copy for the GEMM" : "", q8_out ? " and its int8 copy for the GEMM" : ""));
  if (gate_parts.count || up_parts.count) e.note_variant("adds gate's and up's split-K partials");
}

void encode_add(OpEncoder& e, const engine::AddOp& op) {
  const struct { uint32_t count; } push{to_u32(op.elems, "add elements")};
  const auto& p = e.pipeline(ShaderId::add_inplace_f32, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.x), e.buffer(op.y)}, as_push(push),
             {e.groups_for(push.count, kElementwiseWorkgroup), 1, 1});
  e.note_variant("add_inplace_f32");
}

void encode_add_bias(OpEncoder& e, const engine::AddBiasOp& op) {
  const DeviceWeight& bias = e.weight(op.bias);
  GRETA_CHECK(bias.rows == 1 && bias.cols == op.width, bias.name);
  const struct { uint32_t count, width; } push{to_u32(op.rows * op.width, "bias elements"), to_u32(op.width, "width")};
  const auto& p = e.pipeline(ShaderId::add_bias_f32, {{0, kElementwiseWorkgroup}});
  e.dispatch(p, {e.buffer(op.x), bias.vector.span()}, as_push(push),
             {e.groups_for(push.count, kElementwiseWorkgroup), 1, 1});
  e.note_variant("add_bias_f32");
}

}  // namespace greta::vk
