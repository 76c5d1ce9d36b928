#include "vk/backend/encoder.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace greta::vk {

namespace {
// quantize_q8.comp's chunk of a row: 256 groups of 4 elements (32 blocks) per workgroup of 256 invocations, one step
// each, so a 4096-wide row takes 4 workgroups side by side and an 11008-wide GLU row 11.
constexpr uint32_t kQ8ChunkGroups = 256;
}  // namespace

BufferSpan OpEncoder::buffer(engine::BufferId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < res_.buffers->size(), "buffer id ", id);
  return (*res_.buffers)[size_t(id)];
}

engine::ElemType OpEncoder::buffer_type(engine::BufferId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < res_.decls->size(), "buffer id ", id);
  return (*res_.decls)[size_t(id)].type;
}

void OpEncoder::require_f32(engine::BufferId id, const char* what) const {
  const engine::ElemType type = buffer_type(id);
  if (type != engine::ElemType::F32)
    fail("vk: ", what, " buffer ", (*res_.decls)[size_t(id)].name, " is ", engine::elem_type_name(type),
         "; this kernel takes f32");
}

engine::ElemType OpEncoder::cache_type(engine::BufferId id) const {
  const engine::ElemType type = buffer_type(id);
  if (type != engine::ElemType::F32 && type != engine::ElemType::F16 && type != engine::ElemType::Q8_0)
    fail("vk: KV cache buffer ", (*res_.decls)[size_t(id)].name, " is ", engine::elem_type_name(type),
         " (f32, f16 or q8_0 expected)");
  return type;
}

const DeviceWeight& OpEncoder::weight(engine::WeightId id) const {
  GRETA_CHECK(id >= 0 && size_t(id) < res_.weights->size(), "weight id ", id);
  return (*res_.weights)[size_t(id)];
}

BufferSpan OpEncoder::constant_buffer(const std::vector<float>& values, const std::string& name) {
  GRETA_CHECK(!values.empty(), name);
  Buffer b = res_.allocator->create_buffer(values.size() * sizeof(float), MemoryUse::device, name);
  res_.transfer->upload(b, values);
  res_.constants->push_back(std::move(b));
  return res_.constants->back().span();
}

BufferSpan OpEncoder::scratch_buffer(uint64_t bytes, const std::string& name) {
  res_.constants->push_back(res_.allocator->create_buffer(std::max<uint64_t>(bytes, 4), MemoryUse::device, name));
  return res_.constants->back().span();
}

const ComputePipeline& OpEncoder::pipeline(ShaderId id, std::initializer_list<SpecConstant> spec,
                                           const PipelineOptions& options) {
  return res_.pipelines->get(id, std::span<const SpecConstant>(spec.begin(), spec.size()), options);
}

const ComputePipeline& OpEncoder::pipeline(ShaderId id, std::span<const SpecConstant> spec,
                                           const PipelineOptions& options) {
  return res_.pipelines->get(id, spec, options);
}

void OpEncoder::dispatch(const ComputePipeline& p, std::initializer_list<BufferSpan> buffers,
                         std::span<const std::byte> push, std::array<uint32_t, 3> groups) {
  recorder_->dispatch(p, buffers, push, groups, label_);
}

void OpEncoder::dispatch_indirect(const ComputePipeline& p, std::initializer_list<BufferSpan> buffers,
                                  std::span<const std::byte> push, BufferSpan args,
                                  std::array<uint32_t, 3> max_groups) {
  recorder_->dispatch_indirect(p, std::span<const BufferSpan>(buffers.begin(), buffers.size()), push, args,
                               max_groups, label_);
}

BufferSpan OpEncoder::step_split_groups(uint32_t rows, uint32_t wanted, uint32_t max_splits) {
  GRETA_CHECK(rows > 0 && wanted > 0 && max_splits > 0 && max_splits <= 64, "split groups");
  const StepArgs& args = res_.step_args;
  const auto slot_span = [&](uint32_t slot) {
    return BufferSpan{args.device.buffer, args.device.offset + uint64_t(slot) * StepArgs::kSlotBytes, 16};
  };
  // Every layer's decode attention has the same counts: one slot per distinct shape, written once per step.
  for (const StepSplitGroups& g : *res_.step_groups)
    if (g.rows == rows && g.wanted == wanted && g.max_splits == max_splits) return slot_span(g.slot);
  const uint32_t slot = uint32_t(res_.step_groups->size());
  GRETA_CHECK(slot < StepArgs::kSlots, "more than ", StepArgs::kSlots, " decode attention shapes in one plan");
  res_.step_groups->push_back({slot, rows, wanted, max_splits});
  // Valid until the first step writes it: every split, of the size that covers keys 0 .. 64 * 2^25 (never run so).
  const uint32_t all[4] = {rows, max_splits, 1, 1u << 25};
  std::memcpy(static_cast<std::byte*>(args.upload->mapped()) + slot * StepArgs::kSlotBytes, all, sizeof all);
  args.upload->flush(slot * StepArgs::kSlotBytes, sizeof all);
  return slot_span(slot);
}

uint32_t OpEncoder::groups_for(uint64_t items, uint32_t local) const {
  return group_count(items, local, info().max_workgroup_count[0]);
}

bool OpEncoder::has_coopmat_f16() const {
  const DeviceInfo& i = info();
  return features().cooperative_matrix && i.subgroup_ops_in_compute &&
         i.supports_coopmat(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR);
}

void OpEncoder::note_variant(const std::string& v) {
  if (!variant_) return;
  if (variant_->find(v) != std::string::npos) return;
  *variant_ += variant_->empty() ? v : " + " + v;
}

uint64_t OpEncoder::f16_bytes(uint64_t rows, uint64_t cols) {
  const uint64_t elems = rows * cols;
  GRETA_CHECK(elems > 0 && cols % 4 == 0, "f16 copy of ", rows, " x ", cols, " values");
  // matmul_coopmat reads the copy as uvec4 (8 halves): the span is rounded up to whole 16 bytes.
  const uint64_t bytes = (elems * 2 + 15) / 16 * 16;
  if (f16_span_.size < bytes) f16_span_ = scratch_buffer(bytes, "f16 activations");
  return bytes;
}

BufferSpan OpEncoder::f16_copy(engine::BufferId id, uint64_t rows, uint64_t cols) {
  const uint64_t elems = rows * cols, bytes = f16_bytes(rows, cols);
  if (f16_of_ == id && f16_elems_ >= elems) return {f16_span_.buffer, f16_span_.offset, bytes};
  barrier();  // GEMMs recorded earlier may still read the previous copy
  const BufferSpan src = buffer(id);
  GRETA_CHECK(src.size >= elems * 4, "f16 copy past the end of buffer ", id);
  const uint32_t count4 = to_u32(int64_t(elems / 4), "f16 activations");
  const auto& p = pipeline(ShaderId::convert_f16, {{0, kElementwiseWorkgroup}});
  dispatch(p, {BufferSpan{src.buffer, src.offset, elems * 4}, BufferSpan{f16_span_.buffer, f16_span_.offset, elems * 2}},
           as_push(count4), {groups_for(count4, kElementwiseWorkgroup), 1, 1});
  barrier();
  f16_of_ = id;
  f16_elems_ = elems;
  return {f16_span_.buffer, f16_span_.offset, bytes};
}

BufferSpan OpEncoder::f16_target(engine::BufferId id, uint64_t rows, uint64_t cols) {
  const uint64_t elems = rows * cols;
  f16_bytes(rows, cols);
  barrier();  // GEMMs recorded earlier may still read the previous copy
  f16_of_.reset();
  f16_pending_ = {id, elems};
  return {f16_span_.buffer, f16_span_.offset, elems * 2};
}

OpEncoder::MoeGroups OpEncoder::moe_groups(engine::BufferId experts, uint32_t slots, uint32_t n_experts,
                                            uint32_t bm) {
  const GroupsKey key{experts, slots, n_experts, bm};
  if (groups_of_ == key) return {groups_.sorted, groups_.tiles, true};
  const uint64_t max_tiles = (uint64_t(slots) + bm - 1) / bm + n_experts;
  if (groups_.sorted.size < uint64_t(slots) * 4) groups_.sorted = scratch_buffer(uint64_t(slots) * 4, "moe sorted slots");
  if (groups_.tiles.size < (1 + 3 * max_tiles) * 4) groups_.tiles = scratch_buffer((1 + 3 * max_tiles) * 4, "moe tiles");
  barrier();  // grouped GEMMs recorded earlier may still read the previous lists
  // As many invocations as the device allows, up to 1024: each takes every WG-th slot.
  const uint32_t local = std::min({1024u, info().max_workgroup_invocations, info().max_workgroup_size[0]});
  const struct { uint32_t slots, n_experts; } push{slots, n_experts};
  const auto& p = pipeline(ShaderId::moe_group, {{0, local}, {1, bm}});
  dispatch(p, {buffer(experts), groups_.sorted, groups_.tiles}, as_push(push), {1, 1, 1});
  barrier();
  groups_of_ = key;
  return groups_;
}

BufferSpan OpEncoder::gemm_partials(uint64_t bytes) {
  if (partials_used_ == partials_.size()) partials_.emplace_back();
  BufferSpan& region = partials_[partials_used_++];
  // A larger buffer replaces a small one: the dispatches recorded with the old one keep it (constants live as long as
  // the plan), and it was last read by sums before a flush's barrier.
  if (region.size < bytes) region = scratch_buffer(bytes, "split-K partials");
  return {region.buffer, region.offset, bytes};
}

void OpEncoder::add_split_sum(engine::BufferId id, BufferSpan out, BufferSpan partials, uint32_t count,
                              uint64_t elems, uint64_t stride) {
  split_sums_.push_back({id, out, partials, count, elems, stride, label_, variant_});
}

bool OpEncoder::flush_split_sums(std::span<const SumReader> next_reader_takes) {
  // The sums handed at the previous flush were added by their reader, which is before the barrier preceding this call.
  for (const SplitSum& s : handed_)
    GRETA_CHECK(s.taken, "the split-K sum of ", s.label, " was handed to a reader that did not take it");
  handed_.clear();
  std::vector<SplitSum> now;
  for (SplitSum& s : split_sums_) {
    const bool handed = std::any_of(next_reader_takes.begin(), next_reader_takes.end(),
                                    [&](const SumReader& r) { return r.id == s.id && r.elems >= s.elems; });
    (handed ? handed_ : now).push_back(std::move(s));
  }
  split_sums_.clear();
  if (!now.empty()) {
    barrier();
    const std::string label = label_;
    for (const SplitSum& s : now) {
      const struct { uint32_t count, partials, stride; } push{to_u32(int64_t(s.elems), "split-K partial elements"),
                                                              s.count, to_u32(int64_t(s.stride), "split-K stride")};
      const auto& add = pipeline(ShaderId::add_splits_f32, {{0, kElementwiseWorkgroup}});
      label_ = s.label;
      dispatch(add, {BufferSpan{s.out.buffer, s.out.offset, s.elems * 4}, s.partials}, as_push(push),
               {groups_for(push.count, kElementwiseWorkgroup), 1, 1});
      std::string* const current = variant_;  // the op being recorded
      variant_ = s.variant;
      note_variant("its split-K sum in a stage after it (add_splits_f32)");
      variant_ = current;
    }
    label_ = label;
    barrier();
  }
  if (handed_.empty()) partials_used_ = 0;  // else the handed regions stay taken until the next flush
  return !now.empty();
}

bool OpEncoder::split_sum_handed(engine::BufferId id) const {
  return std::any_of(handed_.begin(), handed_.end(), [&](const SplitSum& s) { return s.id == id; });
}

OpEncoder::SplitPartials OpEncoder::take_split_sum(engine::BufferId id) {
  for (SplitSum& s : handed_)
    if (s.id == id && !s.taken) {
      s.taken = true;
      return {s.partials, s.count, to_u32(int64_t(s.stride), "split-K stride")};
    }
  return {};
}

BufferSpan OpEncoder::zeroed_buffer(uint64_t bytes, const std::string& name) {
  GRETA_CHECK(bytes % 4 == 0, name);
  return constant_buffer(std::vector<float>(std::max<uint64_t>(bytes / 4, 1), 0.f), name);  // 0.f: all bits zero
}

BufferSpan OpEncoder::q8_span_for(const Q8Source& src) {
  GRETA_CHECK(src.cols > 0 && src.cols % 32 == 0 && src.rows > 0 && src.input <= 3, "int8 activations of ",
              src.rows, " x ", src.cols);
  const uint64_t bytes = uint64_t(src.rows) * uint64_t(src.cols) / 32 * 36;  // q8_rows.glsl: 32 codes + a scale
  if (q8_span_.size < bytes) q8_span_ = scratch_buffer(bytes, "int8 activations");
  return {q8_span_.buffer, q8_span_.offset, bytes};
}

BufferSpan OpEncoder::q8_target(const Q8Source& src) {
  const BufferSpan out = q8_span_for(src);
  barrier();  // matvecs recorded earlier may still read the previous copy
  q8_of_.reset();
  q8_fence_.reset();
  q8_pending_ = src;
  return out;
}

bool OpEncoder::q8_lanes(uint32_t local) const {
  const uint32_t sg = info().subgroup_size;
  return sg >= 8 && local % sg == 0;
}

PipelineOptions OpEncoder::q8_lanes_options(uint32_t local) const {
  PipelineOptions options;
  if (q8_lanes(local)) options.full_subgroups = info().compute_full_subgroups;
  return options;
}

uint32_t OpEncoder::q8_workgroup(int64_t cols) const {
  uint32_t local = 8;
  const uint64_t groups = uint64_t(cols) / 4;
  const uint32_t limit = std::min({1024u, info().max_workgroup_invocations, info().max_workgroup_size[0]});
  while (local < groups && local * 2 <= limit) local *= 2;
  return local;
}

void OpEncoder::q8_prefetch(const Q8Source& src) {
  GRETA_CHECK(at_barrier(), "q8_prefetch away from a barrier");
  if (q8_of_ == src) return;
  record_quantize_q8(src);
  q8_of_ = src;
  q8_fence_ = recorder_->barrier_count();
}

OpEncoder::Q8PairTarget OpEncoder::made_target(MadeQ8& m, const Q8Source& src, uint64_t counter_bytes, bool second_ok,
                                               const char* name) {
  const uint64_t bytes = uint64_t(src.rows) * uint64_t(src.cols) / 32 * 36;
  const bool second = second_ok && m.of == src && m.write_fence == recorder_->barrier_count() && !m.read_fence;
  if (!second) {
    if (m.read_fence && *m.read_fence == recorder_->barrier_count()) barrier();  // a reader may still run
    if (m.span.size < bytes) m.span = scratch_buffer(bytes, name);
    if (m.counters.size < counter_bytes) m.counters = zeroed_buffer(counter_bytes, cat(name, ": counters"));
    m.of = src;
    m.write_fence = recorder_->barrier_count();
    m.read_fence.reset();
  }
  m.writing = true;
  return {{m.span.buffer, m.span.offset, bytes}, {m.counters.buffer, m.counters.offset, counter_bytes}};
}

std::optional<BufferSpan> OpEncoder::made_copy(MadeQ8& m, const Q8Source& src) {
  if (m.of != src) return std::nullopt;
  if (m.write_fence == recorder_->barrier_count()) barrier();
  m.read_fence = recorder_->barrier_count();
  return BufferSpan{m.span.buffer, m.span.offset, uint64_t(src.rows) * uint64_t(src.cols) / 32 * 36};
}

OpEncoder::Q8PairTarget OpEncoder::q8_pair_target(const Q8Source& src) {
  GRETA_CHECK(src.cols > 0 && src.cols % 32 == 0 && src.rows > 0 && src.input >= 2, "int8 GLU rows of ", src.rows,
              " x ", src.cols);
  // The second of the pair in the same stage takes what the first set up; anything else starts a new copy.
  return made_target(pair_, src, uint64_t(src.rows) * uint64_t(src.cols) / 32 * 4, true, "int8 GLU made by gate and up");
}

OpEncoder::Q8PairTarget OpEncoder::q8_norm_target(const Q8Source& src) {
  GRETA_CHECK(src.cols > 0 && src.cols % 32 == 0 && src.rows > 0 && src.input == 1 && src.x_row0 == 0,
              "int8 rmsnorm rows of ", src.rows, " x ", src.cols);
  return made_target(norm_, src, norm_out_words(src.rows, src.cols) * 4, false, "int8 rmsnorm made by a projection");
}

BufferSpan OpEncoder::q8_copy(const Q8Source& src) {
  if (const auto made = made_copy(pair_, src)) return *made;  // made by a gate and up pair (q8_pair_target)
  if (const auto made = made_copy(norm_, src)) return *made;  // made by the projection before (q8_norm_target)
  if (q8_of_ == src) {
    if (q8_fence_ && *q8_fence_ == recorder_->barrier_count()) barrier();  // a prefetched copy, still unordered
    q8_fence_.reset();
    return q8_span_for(src);
  }
  barrier();  // matvecs recorded earlier may still read the previous copy
  const BufferSpan out = record_quantize_q8(src);
  barrier();
  q8_of_ = src;
  q8_fence_.reset();
  return out;
}

BufferSpan OpEncoder::record_quantize_q8(const Q8Source& src) {
  const BufferSpan out = q8_span_for(src);
  const BufferSpan x = buffer(src.x);
  const BufferSpan aux = src.input == 1 ? weight(src.norm).vector.span() : src.input >= 2 ? buffer(src.up) : x;
  GRETA_CHECK(x.size >= uint64_t(src.x_row0 + src.rows) * uint64_t(src.cols) * 4, "int8 activations past buffer ",
              src.x);
  // Workgroups over rows and chunks of at most kQ8ChunkGroups 4-element groups, side by side (quantize_q8.comp): a
  // decode step's 1-4 rows would otherwise leave all but 1-4 multiprocessors idle while each walks its row.
  const uint32_t local = std::min(q8_workgroup(src.cols), kQ8ChunkGroups);
  const uint32_t chunks = to_u32((src.cols / 4 + local - 1) / local, "row chunks");
  const struct {
    uint32_t cols, rows, x_row0;
    float eps;
  } push{to_u32(src.cols, "columns"), to_u32(src.rows, "rows"), to_u32(src.x_row0, "row offset"), src.eps};
  std::vector<SpecConstant> spec{{0, local}, {1, src.input}, {4, q8_lanes(local)}};
  if (src.input == 3) spec.insert(spec.end(), {{2, std::bit_cast<uint32_t>(src.alpha)},
                                               {3, std::bit_cast<uint32_t>(src.limit)}});
  const auto& p = pipeline(ShaderId::quantize_q8, spec, q8_lanes_options(local));
  dispatch(p, {x, aux, out}, as_push(push),
           {std::min(push.rows, info().max_workgroup_count[0]), std::min(chunks, info().max_workgroup_count[1]), 1});
  note_variant("quantize_q8");
  return out;
}

uint32_t fused_glu_input(const engine::GluOp& glu) {
  switch (glu.kind) {
    case engine::GluKind::SiLU: return 2;
    case engine::GluKind::SwiGluOai: return 3;
    default: fail("vk: a ", engine::glu_kind_name(glu.kind), " GLU cannot be fused into a matvec's input");
  }
}

void append_glu_constants(std::vector<SpecConstant>& spec, const engine::GluOp& glu) {
  spec.push_back({6, std::bit_cast<uint32_t>(glu.alpha)});
  spec.push_back({7, std::bit_cast<uint32_t>(glu.limit)});
}

void OpEncoder::note_written(std::span<const engine::BufferId> writes) {
  const auto written = [&](engine::BufferId b) { return std::find(writes.begin(), writes.end(), b) != writes.end(); };
  if (f16_of_ && written(*f16_of_)) f16_of_.reset();
  if (f16_pending_) {  // made by the op just recorded
    f16_of_ = f16_pending_->first;
    f16_elems_ = f16_pending_->second;
    f16_pending_.reset();
  }
  if (groups_of_ && written(groups_of_->experts)) groups_of_.reset();
  if (q8_of_ && (written(q8_of_->x) || (q8_of_->up >= 0 && written(q8_of_->up)))) q8_of_.reset();
  if (q8_pending_) q8_of_ = std::exchange(q8_pending_, std::nullopt);  // made by the op just recorded
  // The op that made a copy wrote what it is made of (the pair's gate or up, the projection's stream).
  for (MadeQ8* m : {&pair_, &norm_})
    if (m->writing) m->writing = false;
    else if (m->of && (written(m->of->x) || (m->of->up >= 0 && written(m->of->up)))) m->of.reset();
}

}  // namespace greta::vk
