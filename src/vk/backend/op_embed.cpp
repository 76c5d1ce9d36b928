// Embedding lookup: one dispatch per chunk of the (possibly split) table; each writes the tokens whose row it holds.
#include "vk/backend/encoder.h"

namespace greta::vk {

void encode_embed(OpEncoder& e, const engine::EmbedOp& op) {
  const DeviceWeight& table = e.weight(op.table);
  GRETA_CHECK(table.cols == op.dim && table.rows > 1, table.name);
  const ShaderId id = weight_shader(WeightKernel::embed, table.type);
  const auto& p = e.pipeline(id, {{0, kElementwiseWorkgroup}});
  const uint64_t items = uint64_t(op.n_tokens) * uint64_t((op.dim + 3) / 4);
  for (size_t c = 0; c < table.matrix.chunk_count(); ++c) {
    const struct {
      uint32_t row_begin, chunk_rows, row_bytes, cols, n_tokens;
      float scale;  // EmbedOp::scale (gemma3: sqrt(dim))
    } push{
        to_u32(table.chunk_first_row(c), "row"), to_u32(table.chunk_rows(c), "rows"),
        to_u32(int64_t(table.row_bytes), "row bytes"), to_u32(op.dim, "dim"), to_u32(op.n_tokens, "tokens"), op.scale};
    e.dispatch(p, {table.matrix.chunk(c).span(), e.buffer(op.tokens), e.buffer(op.out)}, as_push(push),
               {e.groups_for(items, kElementwiseWorkgroup), 1, 1});
  }
  e.note_variant(shader_blob(id).name);
}

}  // namespace greta::vk
