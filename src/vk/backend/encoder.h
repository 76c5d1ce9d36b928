// What the per-op encoders (op_*.cpp) see while a plan is recorded: the recorder, the pipelines, the plan's device
// buffers and the model's weights. One function per op kind, declared below, turns one engine op into dispatches.
#pragma once
#include <array>
#include <bit>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/plan.h"
#include "model/tensor_types.h"
#include "vk/backend/tuning.h"
#include "vk/backend/vk_backend.h"
#include "vk/commands.h"
#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipelines.h"
#include "vk/transfer.h"

namespace greta::vk {

// One weight on the device.
struct DeviceWeight {
  std::string name;
  model::GgmlType type = model::GgmlType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;
  SplitBuffer matrix;  // rows > 1: the stored bytes, chunked at whole rows (each chunk a multiple of 4 bytes)
  Buffer vector;       // rows == 1: f32 values
  std::vector<float> host_values;  // rows == 1: the same values on the host (rope frequency factors)
  // Rows [first, first + count) of the matrix held by chunk i.
  int64_t chunk_first_row(size_t i) const { return int64_t(matrix.chunk_offset(i) / row_bytes); }
  int64_t chunk_rows(size_t i) const { return int64_t(matrix.chunk(i).size() / row_bytes); }
};

// The input of the int8 decode matvecs (matvec_q8_<type>): what quantize_q8.comp makes it from. Compared whole, so
// matvecs of one input (Q, K and V; gate and up) share one quantization.
struct Q8Source {
  uint32_t input = 0;  // quantize_q8.comp's INPUT: 0 plain rows, 1 rmsnorm(rows) * norm, 2 silu(gate) * up, 3 gpt-oss's
                       // clamped SwiGLU of gate and up (alpha, limit)
  engine::BufferId x = -1;         // the rows (plain, rmsnorm) or the gate (swiglu)
  engine::BufferId up = -1;        // swiglu: the up projection
  engine::WeightId norm = -1;      // rmsnorm: the norm weight
  int64_t x_row0 = 0, rows = 0, cols = 0;  // rows x_row0 .. x_row0 + rows of x, cols % 32 == 0
  float eps = 0.f;                 // rmsnorm
  float alpha = 0.f, limit = 0.f;  // input 3
  bool operator==(const Q8Source&) const = default;
};

// Decode attention's key splits, which the backend sizes before each step (OpEncoder::step_split_groups) from the
// step's longest sequence: {rows, splits, 1, keys per split} with keys = decode_split_keys(longest, wanted) and as
// many splits as hold keys of it, at most max_splits (the plan's splits at its full context, which size the
// partials). So a plan made for a long context (a server's) runs short sequences in as many splits as a short
// context would, not in a few long ones. Each shape has a slot of StepArgs::kSlotBytes in the plan's
// split-argument buffers: the indirect dispatch reads its first 3 words, the kernel the 4th.
struct StepSplitGroups {
  uint32_t slot, rows, wanted, max_splits;
};
// Keys per split of decode attention over sequences of up to `len` positions: about `wanted` splits (at most 64)
// of at least 32 keys, a multiple of 16 (op_attention.cpp).
uint32_t decode_split_keys(uint64_t len, uint32_t wanted);
// The step's {keys per split, splits} for one StepSplitGroups shape and a longest sequence of `len` positions.
std::pair<uint32_t, uint32_t> step_key_splits(const StepSplitGroups& g, uint64_t len);
// The plan's indirect-dispatch arguments: the host writes `upload` (mapped) before each step, and every recording
// first copies it into `device`, which the dispatches read (as the step inputs: kernels read device memory, not the
// host's over the bus, which cost a bus round trip per dependent read, every layer).
struct StepArgs {
  static constexpr uint32_t kSlots = 16;  // distinct decode attention shapes per plan
  // A slot's bytes: its 4 words, padded to the largest minStorageBufferOffsetAlignment Vulkan allows, so the kernel
  // can bind its slot alone.
  static constexpr uint32_t kSlotBytes = 256;
  Buffer* upload = nullptr;
  BufferSpan device{};
};

// How prefill matmuls pick their tile (op_matmul.cpp): forced > GRETA_VK_COOPMAT_TILE / GRETA_VK_TILED_TILE > tuned
// > the built-in default. A prepared plan keeps its own copy (what was set when it was prepared).
struct MatmulTuning {
  std::optional<MatmulConfig> forced;  // set_matmul_config: greta-vk tune's candidates, tests
  const std::map<MatmulShapeClass, TunedEntry>* tuned = nullptr;  // the cache's entries valid on this device
};

class OpEncoder {
public:
  struct Resources {
    Context* context;
    Pipelines* pipelines;
    Allocator* allocator;
    Transfer* transfer;
    const std::vector<DeviceWeight>* weights;
    const std::vector<BufferSpan>* buffers;  // by BufferId: the whole device buffer
    const std::vector<engine::BufferDecl>* decls;  // by BufferId: the plan's declarations (element types)
    std::deque<Buffer>* constants;  // per-plan buffers made while encoding (kept alive here; never move)
    MatmulKernel matmul;
    bool f16_attention;  // prefill attention may use the f16 cooperative-matrix kernel
    bool q8_matvec;      // decode matvecs of quantized weights may take int8 activations (matvec_q8_<type>)
    const MatmulTuning* tuning;  // prefill matmul tiles
    std::vector<StepSplitGroups>* step_groups;  // written by the backend before each step
    StepArgs step_args;                         // where they are written
    const ExperimentSwitches* switches;         // kernel choices forced for measurements (none in production)
  };
  OpEncoder(Recorder& recorder, const Resources& resources) : recorder_(&recorder), res_(resources) {}

  // Called by the backend before each op: dispatches are labelled with the op index (profiling sums them per op).
  void begin_op(size_t index, std::string* variant_out) {
    label_ = std::to_string(index);
    variant_ = variant_out;
  }

  const DeviceInfo& info() const { return res_.context->info(); }
  const EnabledFeatures& features() const { return res_.context->features(); }
  const ExperimentSwitches& switches() const { return *res_.switches; }
  MatmulKernel matmul_kernel() const { return res_.matmul; }
  bool f16_attention() const { return res_.f16_attention; }
  bool q8_matvec() const { return res_.q8_matvec; }
  const MatmulTuning& matmul_tuning() const { return *res_.tuning; }
  // The device (and this build) has 16x16x16 f16 x f16 -> f32 subgroup cooperative matrices.
  bool has_coopmat_f16() const;
  BufferSpan buffer(engine::BufferId id) const;
  // The element type of plan buffer `id` (F32 activations, I32 step inputs, F32, F16 or Q8_0 KV caches).
  engine::ElemType buffer_type(engine::BufferId id) const;
  // Fails (naming `what`) unless plan buffer `id` holds f32 elements: the kernels of activations take only those.
  void require_f32(engine::BufferId id, const char* what) const;
  // The element type of KV cache buffer `id`: F32, F16 or Q8_0 (engine/kv_q8.h); fails for other types.
  engine::ElemType cache_type(engine::BufferId id) const;
  const DeviceWeight& weight(engine::WeightId id) const;
  // A device buffer holding `values`, alive as long as the prepared plan (RoPE frequency tables).
  BufferSpan constant_buffer(const std::vector<float>& values, const std::string& name);
  // An uninitialised device buffer of `bytes`, alive as long as the prepared plan (attention's split partials).
  BufferSpan scratch_buffer(uint64_t bytes, const std::string& name);
  // The same, filled with zero bytes (counters that the kernels return to zero).
  BufferSpan zeroed_buffer(uint64_t bytes, const std::string& name);

  const ComputePipeline& pipeline(ShaderId id, std::initializer_list<SpecConstant> spec = {},
                                  const PipelineOptions& options = {});
  const ComputePipeline& pipeline(ShaderId id, std::span<const SpecConstant> spec, const PipelineOptions& options = {});
  void dispatch(const ComputePipeline& p, std::initializer_list<BufferSpan> buffers, std::span<const std::byte> push,
                std::array<uint32_t, 3> groups);
  // A dispatch whose workgroup counts come from `args` (step_split_groups) when it runs, at most `max_groups`.
  void dispatch_indirect(const ComputePipeline& p, std::initializer_list<BufferSpan> buffers,
                         std::span<const std::byte> push, BufferSpan args, std::array<uint32_t, 3> max_groups);
  // Indirect dispatch arguments (the first 12 bytes of the span) that the backend sets before every step to {rows,
  // splits, 1} and the split size the kernel reads (the 4th word): step_key_splits for the step's longest sequence
  // (StepInput::max_len()). Shared by the dispatches of one shape (every layer's).
  BufferSpan step_split_groups(uint32_t rows, uint32_t wanted, uint32_t max_splits);
  // A barrier between two dispatches of one op (the engine's ops are separated by the backend).
  void barrier() { recorder_->barrier(); }
  // No dispatch since the last barrier: the next one runs alone unless later ones join it (Recorder::at_barrier).
  bool at_barrier() const { return recorder_->at_barrier(); }
  // Workgroups for a grid-stride loop over `items` with `local` invocations each, capped at the device limit.
  uint32_t groups_for(uint64_t items, uint32_t local) const;
  // Records which kernel the op used (shown by describe_kernels).
  void note_variant(const std::string& v);
  // The first rows x cols floats of plan buffer `id` as f16 (convert_f16.comp, between two barriers) for the prefill
  // GEMMs, so their activations are converted once instead of once per weight-column tile. The copy is reused by the
  // following GEMMs of the same input (Q, K and V; gate and up) until the backend reports a write to it.
  BufferSpan f16_copy(engine::BufferId id, uint64_t rows, uint64_t cols);
  // Where an op that makes plan buffer `id` (rows x cols f32 values) also writes them as f16 (rmsnorm's F16_OUT):
  // f16_copy(id, ...) then returns this span without a dispatch, once the op is recorded (note_written), until a write
  // to `id` by another op.
  BufferSpan f16_target(engine::BufferId id, uint64_t rows, uint64_t cols);
  // The slots of a MoE step listed by expert and cut into tiles of `bm` (moe_group.comp, between two barriers) for the
  // grouped expert GEMMs: `experts` holds the step's `slots` expert ids. Reused by the following grouped GEMMs of the
  // same ids (a layer's gate, up and down) until the backend reports a write to `experts`.
  struct MoeGroups {
    BufferSpan sorted, tiles;
    bool reused = false;  // made for an earlier matmul (no dispatch)
  };
  MoeGroups moe_groups(engine::BufferId experts, uint32_t slots, uint32_t n_experts, uint32_t bm);
  // Scratch for a split-K GEMM's partial products: a region of its own until the next flush_split_sums, so the split
  // GEMMs of one stage (Q, K and V; gate and up) run side by side without a barrier between them.
  BufferSpan gemm_partials(uint64_t bytes);
  // Queues out += the partials (add_splits.comp: `count` partials of `elems` floats at a stride of `stride`) for the
  // next flush_split_sums; `id` is the plan buffer `out` spans (the GEMM's output, whole).
  void add_split_sum(engine::BufferId id, BufferSpan out, BufferSpan partials, uint32_t count, uint64_t elems,
                     uint64_t stride);
  // Records the queued sums after a barrier, then a barrier (they are ordered after their GEMMs and before whatever
  // follows); false when none were recorded. The backend calls it at each stage boundary, so the split-K GEMMs of a
  // stage take one more stage for all their sums (before, every split GEMM took two of its own: a batched decode
  // layer's Q, K and V were six stages, now two). The sums of the buffers in `next_reader_takes` are not recorded but
  // handed to the op recorded next, right after the barrier the backend put before this call, when it covers all
  // their elements: it reads those buffers, adds their partials itself and writes the sums back (take_split_sum), so
  // that stage goes too (the norms, the GLU and rope_kv of a batched decode layer: docs/vulkan.md).
  struct SumReader {
    engine::BufferId id;
    uint64_t elems;  // the reader reads, sums and writes back elements [0, elems) of `id`
  };
  bool flush_split_sums(std::span<const SumReader> next_reader_takes = {});
  // The partials of plan buffer `id` that flush_split_sums handed to the op being recorded (count 0: none, `id` holds
  // its values). The op adds them to its reads of `id`, element i + partials[z * stride + i] for z = 0 .. count - 1 in
  // that order (add_splits.comp's rounding), and writes every sum back to `id`.
  struct SplitPartials {
    BufferSpan partials{};
    uint32_t count = 0, stride = 0;
  };
  SplitPartials take_split_sum(engine::BufferId id);
  // Whether the last flush_split_sums handed the sum of plan buffer `id` to the op recorded after it.
  bool split_sum_handed(engine::BufferId id) const;
  // `source` quantized to int8 per 32 elements (quantize_q8.comp, between two barriers; layout there) for the int8
  // decode matvecs. Reused by the following matvecs of the same source until the backend reports a write to one of
  // its buffers.
  BufferSpan q8_copy(const Q8Source& source);
  // The same made early, beside the dispatches that follow it rather than between two barriers of its own: right
  // after a barrier (at_barrier(), which orders it after the writers of its sources and the readers of the previous
  // copy), for a matvec a few ops later (a MoE layer's gate and up, whose router runs meanwhile). The q8_copy that
  // takes it puts a barrier first if none was recorded since.
  void q8_prefetch(const Q8Source& source);
  // Where a decode MoE layer's gate and up projections write the int8 input of its down projection, `source` (the
  // GLU of their outputs), which they make themselves (matvec_block.comp's GLU_OUT), and their per-block counters:
  // a second int8 buffer, as they read the first. Both of the pair get the same spans; q8_copy(source) then returns
  // it without a dispatch (after a barrier) until a write to the gate or up buffer by another op.
  struct Q8PairTarget {
    BufferSpan q8, counters;
  };
  Q8PairTarget q8_pair_target(const Q8Source& source);
  bool q8_pair_holds(const Q8Source& source) const { return pair_.of == source; }
  // Where a decode step's residual-adding matvec (the attention output or down projection) writes the next rmsnorm's
  // int8 rows `source` (matvec_block.comp's NORM_OUT), and its counters and partial sums (norm_out_words): a third
  // int8 buffer, as the projection reads one and the gate and up pair may write the other. q8_copy(source) returns it
  // without a dispatch (after a barrier) until a write to the stream by another op.
  Q8PairTarget q8_norm_target(const Q8Source& source);
  bool q8_norm_holds(const Q8Source& source) const { return norm_.of == source; }
  // Where an op that makes `source` as int8 itself (decode attention's Q8_OUT) writes it: q8_copy(source) then returns
  // this span without a dispatch, once the op is recorded (note_written), until a write to its buffers.
  BufferSpan q8_target(const Q8Source& source);
  // quantize_q8.comp's workgroup for rows of `cols` values: one 4-element group per invocation (a power of two,
  // 8 .. 1024 and the device limit), so a decode row is one or a few steps. record_quantize_q8 caps it at 256 and
  // runs a row's chunks side by side; the MoE combine, which updates its row in place, keeps one workgroup a row.
  uint32_t q8_workgroup(int64_t cols) const;
  // Whether quantize_q8.comp's workgroup of `local` invocations finds block maxima by subgroup shuffles (its LANES:
  // whole subgroups of at least 8), and the pipeline options that keep them whole.
  bool q8_lanes(uint32_t local) const;
  PipelineOptions q8_lanes_options(uint32_t local) const;
  // The plan buffers the op just recorded writes (invalidates f16_copy's and q8_copy's copies of them).
  void note_written(std::span<const engine::BufferId> writes);

private:
  Recorder* recorder_;
  Resources res_;
  std::string label_;
  std::string* variant_ = nullptr;
  std::optional<engine::BufferId> f16_of_;  // whose f16 copy f16_span_ holds (f16_elems_ values)
  uint64_t f16_elems_ = 0;
  std::optional<std::pair<engine::BufferId, uint64_t>> f16_pending_;  // f16_target: (id, values) of the op recorded
  BufferSpan f16_span_{};
  std::optional<Q8Source> q8_of_;       // what q8_span_ holds
  std::optional<Q8Source> q8_pending_;  // what the op being recorded writes into q8_span_ (q8_target)
  std::optional<uint64_t> q8_fence_;    // q8_prefetch: the recorder's barrier count when it was recorded
  BufferSpan q8_span_{};
  // An int8 copy that decode matvecs make in their last workgroups (matvec_block.comp's GLU_OUT, NORM_OUT) rather
  // than a quantizer dispatch: what `span` holds, the barrier count when its writer was recorded and when a reader
  // last took it; `writing`: the op being recorded writes it (its own writes of the source do not invalidate it).
  struct MadeQ8 {
    std::optional<Q8Source> of;
    uint64_t write_fence = 0;
    std::optional<uint64_t> read_fence;
    bool writing = false;
    BufferSpan span{}, counters{};
  };
  MadeQ8 pair_, norm_;  // q8_pair_target's, q8_norm_target's
  // Sets `m` up to hold `src` (`counter_bytes` of zeroed counters); `second`: a writer in the same stage as the
  // first takes what it set up.
  Q8PairTarget made_target(MadeQ8& m, const Q8Source& src, uint64_t counter_bytes, bool second_ok, const char* name);
  // `m`'s span for a reader of `src`, if it holds it.
  std::optional<BufferSpan> made_copy(MadeQ8& m, const Q8Source& src);
  // gemm_partials' regions: the first partials_used_ are taken by GEMMs whose sums are queued in split_sums_.
  std::vector<BufferSpan> partials_;
  size_t partials_used_ = 0;
  struct SplitSum {
    engine::BufferId id;
    BufferSpan out, partials;
    uint32_t count;
    uint64_t elems, stride;
    std::string label;  // the GEMM's op (profiles attribute the sum to it)
    std::string* variant;  // and its kernel list (describe_kernels)
    bool taken = false;    // handed: take_split_sum gave it to its reader
  };
  std::vector<SplitSum> split_sums_;
  // Sums flush_split_sums handed to the next op: their partials' regions stay in use until the next flush.
  std::vector<SplitSum> handed_;
  struct GroupsKey {
    engine::BufferId experts;
    uint32_t slots, n_experts, bm;
    bool operator==(const GroupsKey&) const = default;
  };
  std::optional<GroupsKey> groups_of_;  // what groups_ holds (moe_groups)
  MoeGroups groups_{};
  // The bytes of an f16 copy of rows x cols values (whole 16 bytes), f16_span_ grown to hold them.
  uint64_t f16_bytes(uint64_t rows, uint64_t cols);
  // q8_span_ sized for `source` (a new buffer when it is too small).
  BufferSpan q8_span_for(const Q8Source& source);
  // The quantize_q8 dispatch into it, no barriers.
  BufferSpan record_quantize_q8(const Q8Source& source);
};

// A GLU made inside a decode kernel's input stage (the swiglu fusion): matvec*.comp's and quantize_q8.comp's INPUT,
// 2 for SiLU, 3 for gpt-oss's clamped SwiGLU (IN_SWIGLU_OAI, whose alpha and limit append_glu_constants adds as
// matvec*.comp's spec constants 6 and 7). Throws for the other activations, which stay ops.
uint32_t fused_glu_input(const engine::GluOp& glu);
void append_glu_constants(std::vector<SpecConstant>& spec, const engine::GluOp& glu);

// Workgroup size of the simple elementwise kernels.
inline constexpr uint32_t kElementwiseWorkgroup = 256;

// A decode step's gate and up projections and the down projection reading the GLU of their outputs: with `glu_pair`
// on both of the pair (`is_up` says which), their int8 matvecs make the down projection's int8 input as well
// (matvec_block.comp's GLU_OUT), when glu_pair_usable holds.
struct GluPair {
  engine::MatMulOp gate, up, down;
  engine::GluOp glu;
  bool is_up = false;
};

// RoPE of Q and K with the KV-cache append of the rotated K (and of V): one dispatch of rope_kv.comp, or, with the
// per-head norms of q and k before the rotation folded in too, of qk_norm_rope_kv.comp.
struct RopeKvArgs {
  engine::RopeOp q, k;                       // same positions, tokens, head size, rotary dims and frequencies
  engine::KvWriteOp k_write;                 // k_write.src == k.x
  std::optional<engine::KvWriteOp> v_write;  // the V append of the same step, when fused too
  std::optional<engine::RmsNormOp> q_norm, k_norm;  // in place over q.x / k.x, one row per head (both or neither)
};

// A decode step's Q, K or V projection that also does its part of the rope_kv record after it (matvec_block.comp's
// ROPE_OUT): `part` 1 rotates Q, 2 rotates K and appends it to the cache, 3 appends V; the backend fuses all three or
// none (rope_kv_parts), and the rope_kv dispatch goes.
struct RopeOut {
  RopeKvArgs rope_kv;
  uint32_t part = 0;
};

// A matmul with what the backend's fusions (fusion.h) folded into it. With `norm` or `swiglu` the decode matvec makes
// its input itself and op.in is not read.
struct MatmulArgs {
  engine::MatMulOp op;
  bool accumulate = false;                 // y += W x: the residual add that consumed the product
  std::optional<engine::RmsNormOp> norm;   // input = rmsnorm(norm.in rows from norm.in_row_offset) * norm.weight
  std::optional<engine::GluOp> swiglu;  // input = act(swiglu.gate) * swiglu.up (SiLU or gpt-oss's clamped SwiGLU)
  std::optional<engine::WeightId> bias;  // y = W x + bias (decode matvecs; the bias add after the matmul)
  std::optional<engine::MoeRouteOp> route;  // a MoE router's matvec: the route over its product (route.logits == out)
  std::optional<GluPair> glu_pair;          // the gate or up projection of a pair making the down projection's input
  std::optional<Q8Source> norm_out;  // with accumulate: also makes the next rmsnorm's int8 rows (norm_out_usable)
  std::optional<RopeOut> rope_out;   // Q, K or V: also does its part of the rope_kv after it (rope_out_usable)
};

// matvec_block.comp's NORM_OUT words (counters, then partial sums) for `rows` token rows of `cols` values: per
// (token group, 32-element block) and per token group counters, then per (token, block) a sum of squares and a max.
inline uint64_t norm_out_words(int64_t rows, int64_t cols) {
  const uint64_t r = uint64_t(rows), blocks = uint64_t(cols) / 32;
  return r * blocks + r + 2 * r * blocks;
}

void encode_embed(OpEncoder& e, const engine::EmbedOp& op);
// With f16_out the norm also writes its output's f16 copy for the GEMMs that read it (OpEncoder::f16_target), with
// q8_out its int8 copy (OpEncoder::q8_target).
void encode_rmsnorm(OpEncoder& e, const engine::RmsNormOp& op, bool f16_out = false, bool q8_out = false);
// The shape a GEMM reads a GLU's (or decode attention's) product as (tokens x its in_features), for its f16 or int8
// copy.
struct GemmRows {
  uint64_t rows, cols;
};
// Every GluKind (glu.comp); with f16_out it also writes the f16 copy the GEMM after it reads (OpEncoder::f16_target),
// with q8_out the int8 copy (OpEncoder::q8_target).
void encode_glu(OpEncoder& e, const engine::GluOp& op, std::optional<GemmRows> f16_out = std::nullopt,
                std::optional<GemmRows> q8_out = std::nullopt);
// The matmul would run on the cooperative-matrix GEMM with f16 activations (OpEncoder::f16_copy of its input).
bool matmul_takes_f16_input(const OpEncoder& e, const engine::MatMulOp& op);
// The matmul would run on the int8 cooperative-matrix GEMM (OpEncoder::q8_copy of its plain input).
bool matmul_takes_q8_input(const OpEncoder& e, const engine::MatMulOp& op);
// With `norm_out` (a decode step's residual-adding projection, accumulate), a matvec that can (norm_out_usable) also
// makes the next rmsnorm's int8 rows.
void encode_matmul(OpEncoder& e, const engine::MatMulOp& op, bool accumulate = false,
                   std::optional<Q8Source> norm_out = std::nullopt);
// The decode matvec kernels (op_matvec.cpp), also with a fused input (norm or swiglu).
void encode_matvec(OpEncoder& e, const MatmulArgs& args);
// The int8 input encode_matvec quantizes for `args` (its fused input made by the quantizer), or nullopt when it runs
// on f32 activations.
std::optional<Q8Source> matvec_q8_input(OpEncoder& e, const MatmulArgs& args);
// Whether the pair's gate and up matvecs can make the down projection's int8 input: a one-token step, all three on
// the int8 block-wise kernels, gate and up in one buffer each, a row group's rows within one block of 32. The same
// answer for both of the pair. (At 4 tokens the counting cost the 8B's step 10 % on the H200: docs/benchmarks.md.)
bool glu_pair_usable(OpEncoder& e, const GluPair& pair);
// Whether the residual-adding matvec of `args` can also make args.norm_out, the next rmsnorm's int8 rows of the stream
// it adds into (matvec_block.comp's NORM_OUT): a one-token step, an int8 block-wise matvec over whole 32-row blocks in
// one buffer, adding into rows 0.. of the norm's own input, a row group's rows within one block of 32.
bool norm_out_usable(OpEncoder& e, const MatmulArgs& args);
// Whether the matvec of `args` can do args.rope_out's part: a step of 1-4 tokens, an int8 block-wise matvec with its
// norm fused (a layer's Q, K, V), in one buffer, row groups of whole pairs, adjacent pairs (llama's rotation), an f32
// or f16 cache, no per-head norms.
bool rope_out_usable(OpEncoder& e, const MatmulArgs& args);
// A matvec workgroup shape (invocations, rows) forced for measurements by the switch `variable` (GRETA_VK_MATVEC for
// the dense matvecs, GRETA_VK_MOE_MATVEC for the expert ones) as WGxROWS; nullopt when unset.
std::optional<std::pair<uint32_t, uint32_t>> forced_matvec_shape(const OpEncoder& e, const char* variable);
// Whether `tile` satisfies the kernel's rules on the device (matmul_tiled.comp / matmul_coopmat.comp limits).
bool matmul_tile_valid(GemmKernel kernel, const MatmulTile& tile, const DeviceInfo& info);
// matmul_coopmat's shared-memory stages for `tile` on the device: 2 where they fit, else 1.
uint32_t coopmat_stages(const MatmulTile& tile, const DeviceInfo& info);
// The split-K of a cooperative-matrix GEMM over a grid of `groups` workgroups and `k_steps` K steps of `n_tokens`
// tokens (`alone`: no dispatch of its stage before it; GRETA_VK_GEMM_SPLIT forces it), and its widening for batched
// steps of 33-64 tokens (op_matmul.cpp explains both rules).
uint32_t coopmat_split(uint64_t groups, uint32_t k_steps, bool alone, int64_t n_tokens, const DeviceInfo& info,
                       const ExperimentSwitches& switches);
uint32_t widen_batched_split(uint32_t split, uint64_t groups, uint32_t k_steps, const DeviceInfo& info);
// Whether the device (and this build) can run matmul_coopmat for weights of `type`.
bool coopmat_matmul_usable(const DeviceInfo& info, const EnabledFeatures& features, model::GgmlType type);
// Whether encode_matmul takes the matvec kernels for `op` under the `kernel` option: automatic up to 8 tokens, or 4
// where the cooperative-matrix GEMM runs the weight (coopmat_gemm; the decode fusions stop at 4 tokens either way).
bool matmul_uses_matvec(MatmulKernel kernel, const engine::MatMulOp& op, bool coopmat_gemm = false);
void encode_add_bias(OpEncoder& e, const engine::AddBiasOp& op);
void encode_rope(OpEncoder& e, const engine::RopeOp& op);
// The rope's inverse frequencies as a plan constant buffer (op_rope.cpp).
BufferSpan rope_inv_freq(OpEncoder& e, const engine::RopeOp& op);
void encode_rope_kv(OpEncoder& e, const RopeKvArgs& args);
void encode_kv_write(OpEncoder& e, const engine::KvWriteOp& op);
// With f16_out the decode kernel that merges the rows also writes the f16 copy the GEMM after it reads
// (OpEncoder::f16_target); the other paths leave the conversion to the GEMM.
void encode_attention(OpEncoder& e, const engine::AttentionOp& op, std::optional<GemmRows> f16_out = std::nullopt);
void encode_gather_rows(OpEncoder& e, const engine::GatherRowsOp& op);
void encode_add(OpEncoder& e, const engine::AddOp& op);
// Mixture of experts (op_moe.cpp).
void encode_moe_route(OpEncoder& e, const engine::MoeRouteOp& op);
// Fails (naming the limit) unless the Vulkan kernels can route `op`: k, the expert count, the buffer types.
void check_moe_route(OpEncoder& e, const engine::MoeRouteOp& op);
// The gating rule as describe_kernels shows it ("softmax, top-k, normalized").
std::string moe_route_note(const engine::MoeRouteOp& op);
// The input an expert matmul may make itself (decode fusions, fusion.h): rmsnorm(norm.in) * norm.weight for the
// gate and up projections, silu(gate) * up for the down projection. Only where moe_matvec_takes_input(op) holds.
// With `glu_pair` (gate and up projections of one decode step that read the same rows, and the down projection
// reading the GLU of their outputs): the pair makes the down projection's int8 input as well (GLU_OUT), when
// moe_glu_pair_usable holds; `is_up` says which of the two this op is.
struct MoeGluPair {
  engine::MoeMatMulOp gate, up, down;
  engine::GluOp glu;
  bool is_up = false;
};
struct MoeFusedInput {
  std::optional<engine::RmsNormOp> norm;
  std::optional<engine::GluOp> swiglu;
  std::optional<MoeGluPair> glu_pair;
};
void encode_moe_matmul(OpEncoder& e, const engine::MoeMatMulOp& op, const MoeFusedInput* fused = nullptr);
// Whether the pair's gate and up dispatches can make the down projection's int8 input (all three on the int8
// block-wise kernels, blocks of 32 rows whole in each workgroup's rows): the same answer for both of the pair.
bool moe_glu_pair_usable(OpEncoder& e, const MoeGluPair& pair);
// Whether encode_moe_matmul takes `op` (a decode step: quantized experts in one buffer, rows a multiple of 32) on the
// block-wise matvec kernels, which can make a fused input.
bool moe_matvec_takes_input(const engine::MoeMatMulOp& op, model::GgmlType weight_type, size_t weight_chunks);
// The int8 input encode_moe_matmul quantizes for `op` (with `fused`'s input made by the quantizer), or nullopt when it
// runs on f32 activations.
std::optional<Q8Source> moe_q8_input(OpEncoder& e, const engine::MoeMatMulOp& op, const MoeFusedInput* fused);
// accumulate: out += the combination (the residual add that consumed it).
void encode_moe_combine(OpEncoder& e, const engine::MoeCombineOp& op, bool accumulate = false);
// The same adding into the residual stream, and in the same dispatch (quantize_q8_combine) `next`: the int8 copy of
// the new stream's rmsnorm that the next layer's first matvecs read (a decode step; next.x == op.out, next.input 1,
// x_row0 0, one row per token). Whether `next` qualifies: moe_combine_makes(op, next).
void encode_moe_combine_q8(OpEncoder& e, const engine::MoeCombineOp& op, const Q8Source& next);
bool moe_combine_makes(const engine::MoeCombineOp& op, const Q8Source& next);

// The per-type variant of a weight-reading kernel family (weight_shaders.cpp). Throws greta::Error naming the type
// when the family has no variant for it.
enum class WeightKernel {
  embed,
  matvec,
  matvec_block,
  matvec_q8,
  matmul_tiled,
  matmul_coopmat,
  matmul_coopmat_x16,
  matmul_coopmat_q8,
};
ShaderId weight_shader(WeightKernel kernel, model::GgmlType type);
// Whether the family has a variant for the type (matvec_block, matvec_q8: the quantized types only; matvec_q8 and
// matmul_coopmat_q8 (Q4_0, Q4_K, Q6_K) also need a glslang with GL_EXT_integer_dot_product at build time).
bool has_weight_shader(WeightKernel kernel, model::GgmlType type);

// Plan-level push constants are 32-bit: sizes beyond that are refused with the op's name.
uint32_t to_u32(int64_t v, const char* what);

}  // namespace greta::vk
