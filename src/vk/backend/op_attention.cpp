// Attention in flash-attention form (online softmax, no [n x n] scores in memory):
//   prefill (>= 16 tokens, not a batched decode step), head dim a multiple of 16 up to 128, device with f16
//   cooperative matrices, and the model not an F32 one: attention_coopmat (16 queries x 32 keys per step on matrix cores; f16 Q, K, P, V)
//   otherwise: attention_f32, one workgroup per (token, query head), f32 throughout; for decode (<= 4 tokens, or a
//   batched decode step of one token per sequence: AttentionOp::one_query_per_seq) the
//   keys are also split over workgroups (at most 64 splits of >= 64 keys, over a sequence's whole context since the
//   lengths are only known on the device) and attention_combine merges the partial results; attention_decode (head
//   dims that are multiples of 4) merges them in its last workgroup per row instead, and can write the output as
//   int8 for the int8 output projection (attention_decode.comp); attention_decode_coopmat does the same on
//   cooperative matrices for the GQA head groups of large batched decode steps (decode_coopmat_heads).
// Every kernel reads the paged cache through the page table (engine/plan.h; tokens of several sequences may share a
// step) and has a variant per cache type: *_kvf16 reads f16 caches (16-bit storage) and computes in f32, *_kvq8 reads
// Q8_0 caches (engine/kv_q8.h; dequantized in f32, and rounded to f16 by attention_coopmat as f32 caches are).
// Sliding windows (AttentionOp::window) and sinks are in every kernel (push constants window, has_sinks; the sinks
// vector is each kernel's last binding): the key loops start at the window's first key, and a sink starts the
// online softmax of split 0 as a virtual key of value 0, so the split merges count it once.
#include <algorithm>
#include <bit>
#include <string_view>

#include "core/error.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

// attention_coopmat.comp's shared memory at its largest head dim (128) with `warps` subgroups: the K and V tiles
// (f16, 32 keys, rows padded by 8 halves), then per subgroup S (f32), P (f16) and the row state (alpha, l, position,
// sequence).
constexpr uint32_t coopmat_attention_shared_bytes(uint32_t warps) {
  return 2 * 32 * (128 + 8) * 2 + warps * (16 * 32 * 4 + 16 * 32 * 2 + 4 * 16 * 4);
}

namespace {

// attention_decode.comp's work layout: query heads per workgroup (sharing their KV head's loads), lanes per key slot
// and vec4 per lane. Several heads per workgroup where a step has rows to spare (a batched decode step: at least
// 512 rows, e.g. 16 sequences x 32 heads), since they divide the workgroups; up to 4, dividing the query heads per
// KV head, with heads x vec4 per lane <= 4 (registers) and heads x subgroups <= 16 (the shader's shared arrays).
// Lanes per key: the fewest (a power of two) whose vec4 cover the head dims, so a subgroup scores as many keys at
// once as it can with the shortest shuffle reductions. GRETA_VK_ATTN_HEADS=1|2|4 forces the heads (measurements).
// The shorter shuffle chains pay until the registers cost occupancy; 4 heads from 512 rows (16 sequences of the 8B),
// since a workgroup merges its heads' splits at once (attention_decode.comp's finish_group), and one head below, where
// 4 lost (docs/benchmarks.md, "op_attention.cpp's rules").
// The workgroup: 128 invocations (at least a subgroup), fewer where heads x subgroups would pass 16 (small subgroups),
// never fewer than head_dim_v / 4 (the single-split path writes a row with one vec4 per invocation).
struct DecodeLayout {
  uint32_t heads = 1, lanes_per_key = 1, vec4_per_lane = 1, local = 128;
};

DecodeLayout decode_layout(const engine::AttentionOp& op, uint32_t rows, uint32_t subgroup,
                           const ExperimentSwitches& switches) {
  const uint32_t group = uint32_t(op.n_heads / op.n_kv_heads);
  const uint32_t dim4 = uint32_t(std::max(op.head_dim, op.head_dim_v) / 4);
  uint32_t heads = rows >= 512 ? 4 : 1;
  if (const char* v = switches.get("GRETA_VK_ATTN_HEADS")) {
    const std::string_view s(v);
    if (s != "1" && s != "2" && s != "4") fail("GRETA_VK_ATTN_HEADS=", s, ": expected 1, 2 or 4");
    heads = uint32_t(s[0] - '0');
  }
  for (;; heads /= 2) {
    const uint32_t max_c = 4 / heads;
    const uint32_t lanes = std::min(std::bit_ceil((dim4 + max_c - 1) / max_c), subgroup);
    const uint32_t local = std::max(subgroup, std::min(128u, 16 / heads * subgroup));
    if (heads == 1 || (group % heads == 0 && (dim4 + lanes - 1) / lanes <= max_c && local >= op.head_dim_v / 4))
      return {heads, lanes, (dim4 + lanes - 1) / lanes, local};
  }
}

// The decode kernels' target workgroup counts (the key splits of a step: see encode_attention).
// attention_decode_coopmat aims at one wave of its workgroups on an H200 (227 registers: two per SM; more splits
// were slower: docs/benchmarks.md, "op_attention.cpp's rules").
constexpr int64_t kDecodeTargetGroups = 512, kDecodeCoopmatTargetGroups = 256;

// attention_decode_coopmat.comp's shared memory: S, P and the alphas of 4 subgroups, their staged K or V rows (16
// keys of up to 128 dims: 17 uvec4 each), the merge's per-(subgroup, head) state (16 slots, 32 on the 8-column
// tile, which takes 8 heads).
constexpr uint32_t decode_coopmat_shared(uint32_t slots) {
  return 4 * (256 * 4 + 256 * 2 + 16 * 4) + 4 * 16 * 17 * 16 + slots * 32 * 16 + slots * 8;
}

// attention_decode_coopmat's tile of 8 head columns where the device multiplies 16x8x16 f16 (NVIDIA: one mma each;
// the accumulators of O^T take half the registers of 16 columns), else its 16 columns (every KHR device with f16
// products, AMD's among them). GRETA_VK_ATTN_COOPMAT=16 forces 16 (tests, measurements).
ShaderId decode_coopmat_shader(const OpEncoder& e) {
  const char* forced = e.switches().get("GRETA_VK_ATTN_COOPMAT");
  const bool narrow =
      e.info().supports_coopmat(16, 8, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR) &&
      !(forced && std::string_view(forced) == "16") && shader_available(ShaderId::attention_decode_coopmat_n8_f16_kvf16);
  return narrow ? ShaderId::attention_decode_coopmat_n8_f16_kvf16 : ShaderId::attention_decode_coopmat_f16_kvf16;
}

// Query heads per workgroup of attention_decode_coopmat (the query heads of a KV head as the columns of one tile: 8
// on the 8-column tile where 8 divide the group, else the largest of 4, 3, 2 dividing it), or 0 where it does not
// apply: a batched decode step (one token per sequence, whose rows share nothing else) over an f16 cache, GQA (2 or
// more heads per KV head), head_dim == head_dim_v of 16, 32, 64 or 128 (rows staged as uvec4 by shifts), pages of a
// multiple of 16 positions, f16 cooperative matrices, subgroups of at least 32 (4-8 softmax lanes per head), a model
// whose attention may round to f16 (OpEncoder::f16_attention), and at least 128 head groups (16 sequences of the 8B:
// its splits sized for about kDecodeCoopmatTargetGroups workgroups then hold several blocks of 16 keys per
// subgroup). Below that a workgroup's setup and merge (Q staged, the first blocks' latency, the subgroups' merge)
// cost more than attention_decode's shuffles (docs/benchmarks.md, "op_attention.cpp's rules").
// GRETA_VK_ATTN_COOPMAT=1 takes it at any count, =16 too on its 16-column tile (decode_coopmat_shader), =0 never
// (tests, measurements); GRETA_VK_ATTN_HEADS, which forces attention_decode's layout, also keeps attention_decode.
uint32_t decode_coopmat_heads(const OpEncoder& e, const engine::AttentionOp& op, bool f16_cache, uint32_t rows) {
  const char* forced = e.switches().get("GRETA_VK_ATTN_COOPMAT");
  const std::string_view f = forced ? forced : "";
  if (forced && f != "0" && f != "1" && f != "16") fail("GRETA_VK_ATTN_COOPMAT=", f, ": expected 0, 1 or 16");
  if (f == "0" || e.switches().get("GRETA_VK_ATTN_HEADS")) return 0;
  const int64_t group = op.n_heads / op.n_kv_heads;
  const bool narrow = decode_coopmat_shader(e) == ShaderId::attention_decode_coopmat_n8_f16_kvf16;
  const uint32_t heads =
      narrow && group % 8 == 0 ? 8 : group % 4 == 0 ? 4 : group % 3 == 0 ? 3 : group % 2 == 0 ? 2 : 1;
  const DeviceInfo& info = e.info();
  const bool enough_rows = rows / heads >= kDecodeCoopmatTargetGroups / 2 || forced;
  const bool usable = enough_rows && op.one_query_per_seq && f16_cache && e.f16_attention() && heads >= 2 &&
                      op.head_dim == op.head_dim_v && op.head_dim >= 16 && op.head_dim <= 128 &&
                      std::has_single_bit(uint64_t(op.head_dim)) &&
                      op.page_size % 16 == 0 && e.has_coopmat_f16() && info.subgroup_size >= 32 &&
                      info.subgroup_size <= 128 && info.compute_full_subgroups &&
                      info.max_shared_memory >= decode_coopmat_shared(narrow ? 32 : 16) &&
                      shader_available(ShaderId::attention_decode_coopmat_f16_kvf16);
  return usable ? heads : 0;
}

}  // namespace

void encode_attention(OpEncoder& e, const engine::AttentionOp& op, std::optional<GemmRows> f16_out) {
  constexpr uint32_t kLocal = 64;  // keys per block; attention.comp covers head_dim_v <= 4 * kLocal
  if (op.head_dim > 512 || op.head_dim_v > 4 * int64_t(kLocal))
    fail("vk: attention with head dim ", op.head_dim, " / ", op.head_dim_v, " is not supported (at most 256)");
  GRETA_CHECK(op.n_kv_heads > 0 && op.n_heads % op.n_kv_heads == 0);
  GRETA_CHECK(op.page_size > 0 && op.pages_per_seq > 0 && op.n_seqs > 0 && op.cache_rows > 0, "attention KV layout");
  to_u32(op.cache_rows * op.n_kv_heads * std::max(op.head_dim, op.head_dim_v), "kv cache elements");
  to_u32(op.n_seqs * op.pages_per_seq, "page table entries");
  e.require_f32(op.q, "attention query");
  e.require_f32(op.out, "attention output");
  const engine::ElemType cache = e.cache_type(op.k_cache);
  if (e.cache_type(op.v_cache) != cache) fail("vk: attention over K and V caches of different types");
  const bool f16 = cache == engine::ElemType::F16, q8 = cache == engine::ElemType::Q8_0;
  const char* cache_suffix = f16 ? "_kvf16" : q8 ? "_kvq8" : "";
  // Q8_0 cache rows are whole blocks of 32 (the plan builder checks it too): the kernels index blocks by element.
  if (q8) GRETA_CHECK((op.n_kv_heads * op.head_dim) % 32 == 0 && (op.n_kv_heads * op.head_dim_v) % 32 == 0,
                      "q8_0 kv cache rows of ", op.n_kv_heads, " x ", op.head_dim, " elements");
  // The kernel variant of a family for this cache type.
  const auto variant = [&](ShaderId f32_id, ShaderId f16_id, ShaderId q8_id) {
    return f16 ? f16_id : q8 ? q8_id : f32_id;
  };
  const ShaderId coopmat_id = variant(ShaderId::attention_coopmat_f16, ShaderId::attention_coopmat_f16_kvf16,
                                      ShaderId::attention_coopmat_f16_kvq8);
  // The longest key range of a token: a sequence's whole context (its page-table row).
  const int64_t ctx = op.pages_per_seq * op.page_size;
  // Every attention kernel's push constants (split_keys 0: no key splits; attention_coopmat ignores it).
  struct Push {
    uint32_t n_tokens, n_heads, n_kv_heads, head_dim, head_dim_v;
    float scale;
    uint32_t split_keys, page_size, pages_per_seq;
    uint32_t window, has_sinks;
  };
  const Push push{to_u32(op.n_tokens, "tokens"),   to_u32(op.n_heads, "heads"),
                  to_u32(op.n_kv_heads, "kv heads"), to_u32(op.head_dim, "head dim"),
                  to_u32(op.head_dim_v, "head dim v"), op.scale,
                  0,                                  to_u32(op.page_size, "page size"),
                  to_u32(op.pages_per_seq, "pages per sequence"),
                  to_u32(op.window, "attention window"),
                  op.sinks != engine::kNoWeight ? 1u : 0u};
  const BufferSpan q = e.buffer(op.q), k = e.buffer(op.k_cache), v = e.buffer(op.v_cache), pos = e.buffer(op.positions),
                   out = e.buffer(op.out), seq = e.buffer(op.seq), pages = e.buffer(op.page_table);
  BufferSpan sinks = q;  // a stand-in when the op has none (every declared binding is bound)
  if (op.sinks != engine::kNoWeight) {
    const DeviceWeight& sw = e.weight(op.sinks);
    GRETA_CHECK(sw.rows == 1 && sw.cols == op.n_heads, sw.name, ": attention sinks of ", sw.cols, " heads");
    sinks = sw.vector.span();
  }
  const std::string extras = cat(op.window > 0 ? cat(", window ", op.window) : std::string(),
                                 op.sinks != engine::kNoWeight ? ", sinks" : "");
  // attention_coopmat stages 32-key blocks that must lie on one page; attention_decode scores 4 keys on one page.
  const bool coopmat = e.f16_attention() && op.n_tokens >= 16 && !op.one_query_per_seq && op.head_dim == op.head_dim_v && op.page_size % 32 == 0 &&
                       op.head_dim % 16 == 0 && op.head_dim <= 128 && e.has_coopmat_f16() &&
                       e.info().max_shared_memory >= coopmat_attention_shared_bytes(1) &&
                       e.info().subgroup_size >= 32 && e.info().compute_full_subgroups &&
                       shader_available(coopmat_id);
  if (coopmat) {
    const uint32_t sg = e.info().subgroup_size;
    PipelineOptions options;
    options.full_subgroups = e.info().compute_full_subgroups;
    if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
    // Up to 4 subgroups share each K/V tile, as the shared memory and the workgroup size allow (at most 4: Q is
    // staged through the K and V tiles).
    uint32_t warps = 4;
    while (warps > 1 && (e.info().max_shared_memory < coopmat_attention_shared_bytes(warps) ||
                         warps * sg > e.info().max_workgroup_invocations))
      warps /= 2;
    const auto& p = e.pipeline(coopmat_id, {{0, warps * sg}, {1, warps}, {2, uint32_t(op.page_size)}}, options);
    const uint64_t groups = uint64_t((op.n_tokens + 16 * warps - 1) / (16 * warps)) * uint64_t(op.n_heads);
    if (groups > e.info().max_workgroup_count[0])
      fail("vk: attention over ", op.n_tokens, " tokens needs too many workgroups");
    e.dispatch(p, {q, k, v, pos, out, seq, pages, sinks}, as_push(push), {uint32_t(groups), 1, 1});
    e.note_variant(cat("attention_coopmat_f16", cache_suffix, " (", warps, warps == 1 ? " subgroup" : " subgroups",
                       extras, ")"));
    return;
  }
  const auto& p = e.pipeline(
      variant(ShaderId::attention_f32, ShaderId::attention_f32_kvf16, ShaderId::attention_f32_kvq8), {{0, kLocal}});
  const std::string f32_name = cat("attention_f32", cache_suffix);
  const uint32_t rows = to_u32(op.n_tokens * op.n_heads, "attention rows");
  const uint32_t groups = std::min<uint32_t>(rows, e.info().max_workgroup_count[0]);
  const int64_t min_split = (ctx + 63) / 64;  // at most 64 splits
  const int64_t split_keys = std::max<int64_t>(kLocal, (min_split + kLocal - 1) / kLocal * kLocal);
  const int64_t n_splits = (ctx + split_keys - 1) / split_keys;
  // Split-K (and the decode kernel) for decode steps: a few tokens of one sequence, or one token of each of many
  // (a batched decode step: each row's keys are its own sequence's, so a tile of queries would share nothing).
  if ((op.n_tokens > 4 && !op.one_query_per_seq) || n_splits < 2 || n_splits > e.info().max_workgroup_count[1]) {
    // `out` stands in for the partials
    e.dispatch(p, {q, k, v, pos, out, out, seq, pages, sinks}, as_push(push), {groups, 1, 1});
    e.note_variant(f32_name + (extras.empty() ? "" : cat(" (", extras.substr(2), ")")));
    return;
  }
  // attention_decode: subgroups walk keys on their own (see the shader), for head dims it covers.
  const uint32_t sg = e.info().subgroup_size;
  // attention_decode_coopmat: 128 invocations (1-4 subgroups), a head group's rows in one tile.
  const uint32_t coopmat_heads = decode_coopmat_heads(e, op, f16, rows);
  const DecodeLayout layout =
      coopmat_heads ? DecodeLayout{coopmat_heads, 0, 0, std::max(128u, sg)} : decode_layout(op, rows, sg, e.switches());
  const uint32_t decode_local = layout.local;
  const bool decode_kernel = op.head_dim % 4 == 0 && op.head_dim_v % 4 == 0 && op.head_dim <= 16 * int64_t(sg) &&
                             op.head_dim_v <= std::min<int64_t>(256, 16 * int64_t(sg)) && decode_local / sg <= 16 &&
                             e.info().compute_full_subgroups && rows <= e.info().max_workgroup_count[0] &&
                             (e.info().subgroup_operations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  const uint32_t decode_groups = rows / layout.heads;
  // "attention_decode_f32_kvf16 (4 heads, 16 lanes per key, " or "attention_decode_coopmat_f16_kvf16 (4 heads, ":
  // the layout, then the splits.
  const ShaderId coopmat_shader = decode_coopmat_shader(e);
  const std::string decode_name =
      coopmat_heads ? cat(shader_blob(coopmat_shader).name, " (", layout.heads, " heads, ")
                    : cat("attention_decode_f32", cache_suffix, " (", layout.heads,
                          layout.heads > 1 ? " heads" : " head", ", ", layout.lanes_per_key, " lanes per key, ");
  // Its splits: enough workgroups to fill a large GPU (about kDecodeTargetGroups, a constant from the H200), at most
  // 64 splits, of at least 32 keys, so a 32-head model at context 128 still gets 128 workgroups. Each split costs its
  // partial, its count and a share of the merge, so the target is about 4 workgroups per SM of an H200, not more. A
  // batched decode step has many rows already: 64 sequences x 32 heads run unsplit (in splits of 32 keys each
  // workgroup did little more than its setup and the merge, and 2 splits lost 5 %; docs/benchmarks.md,
  // "op_attention.cpp's rules"). Sized here for the plan's context (the partials); with MERGE the backend sizes them
  // again before each step for the step's longest sequence (step_key_splits).
  const int64_t group_rows = decode_kernel ? decode_groups : rows;
  const int64_t target_groups = coopmat_heads ? kDecodeCoopmatTargetGroups : kDecodeTargetGroups;
  const uint32_t wanted_splits =
      uint32_t(std::clamp<int64_t>((target_groups + group_rows - 1) / group_rows, 1, 64));
  const int64_t keys_per_split = decode_kernel ? int64_t(decode_split_keys(uint64_t(ctx), wanted_splits)) : split_keys;
  const int64_t splits = (ctx + keys_per_split - 1) / keys_per_split;
  Push split = push;
  split.split_keys = uint32_t(keys_per_split);
  const BufferSpan partials =
      e.scratch_buffer(uint64_t(rows) * uint64_t(splits) * uint64_t(op.head_dim_v + 2) * 4, "attention partials");
  if (decode_kernel) {
    PipelineOptions options;
    options.full_subgroups = true;
    if (e.info().subgroup_size_control) options.required_subgroup_size = sg;
    // The last workgroup of each head group merges the splits (MERGE; at most 64, as decode_split_keys makes them),
    // and with int8 decode matvecs also writes the output projection's int8 input (Q8_OUT: a block's maximum over 8
    // invocations' shuffles): no combine and no quantizer dispatch.
    const bool merge = splits <= 64;
    const bool q8_out = merge && e.q8_matvec() && op.head_dim_v % 32 == 0 && sg >= 8;
    const BufferSpan counters = merge ? e.zeroed_buffer(uint64_t(rows) * 4, "attention split counters") : partials;
    const BufferSpan q8 = q8_out ? e.q8_target(Q8Source{.x = op.out, .rows = op.n_tokens,
                                                        .cols = op.n_heads * op.head_dim_v})
                                 : out;  // stand-ins: every declared binding is bound
    // The f16 copy the cooperative-matrix output projection reads (OpEncoder::f16_target): written by the kernel that
    // writes the rows, the merging one (H200, batched decode: one conversion stage a layer fewer).
    const bool f16 = merge && f16_out.has_value();
    GRETA_CHECK(!f16 || f16_out->rows * f16_out->cols == uint64_t(op.n_tokens * op.n_heads * op.head_dim_v),
                "f16 attention output of ", f16_out ? f16_out->rows * f16_out->cols : 0, " values");
    const BufferSpan out16 = f16 ? e.f16_target(op.out, f16_out->rows, f16_out->cols) : out;
    GRETA_CHECK(!coopmat_heads || merge, "attention_decode_coopmat over ", splits, " key splits (at most 64)");
    const auto& d =
        coopmat_heads
            ? e.pipeline(coopmat_shader,
                         {{0, decode_local}, {1, merge}, {2, q8_out}, {3, uint32_t(op.page_size)}, {4, layout.heads},
                          {7, f16}},
                         options)
            : e.pipeline(variant(ShaderId::attention_decode_f32, ShaderId::attention_decode_f32_kvf16,
                                 ShaderId::attention_decode_f32_kvq8),
                         {{0, decode_local},
                          {1, merge},
                          {2, q8_out},
                          {3, uint32_t(op.page_size)},
                          {4, layout.heads},
                          {5, layout.lanes_per_key},
                          {6, layout.vec4_per_lane},
                          {7, f16}},
                         options);
    if (merge) {
      // The backend sizes the splits before each step for its longest sequence (the split size in the 4th word of
      // the indirect arguments, binding 11): only splits that hold keys run (a short sequence is one or two splits,
      // not 64 workgroups per row that find no keys), and a plan for a long context splits short sequences as finely
      // as a plan for a short one.
      const BufferSpan groups = e.step_split_groups(decode_groups, wanted_splits, uint32_t(splits));
      e.dispatch_indirect(d, {q, k, v, pos, out, partials, counters, q8, seq, pages, sinks, groups, out16},
                          as_push(split), groups, {decode_groups, uint32_t(splits), 1});
      e.note_variant(cat(decode_name, "up to ", splits,
                         " key splits, sized for each step's longest sequence, merged by the last",
                         q8_out ? "; int8 output" : "", f16 ? "; f16 output for the GEMM" : "", extras, ")"));
      return;
    }
    e.dispatch(d, {q, k, v, pos, out, partials, counters, q8, seq, pages, sinks, partials, out}, as_push(split),
               {decode_groups, uint32_t(splits), 1});
  } else {
    e.dispatch(p, {q, k, v, pos, out, partials, seq, pages, sinks}, as_push(split), {groups, uint32_t(splits), 1});
  }
  e.barrier();
  const struct { uint32_t rows, n_splits, head_dim_v; } combine{rows, uint32_t(splits), push.head_dim_v};
  const auto& c = e.pipeline(ShaderId::attention_combine_f32, {{0, kElementwiseWorkgroup}});
  e.dispatch(c, {partials, out}, as_push(combine),
             {e.groups_for(uint64_t(rows) * uint64_t(op.head_dim_v), kElementwiseWorkgroup), 1, 1});
  e.note_variant(cat(decode_kernel ? decode_name : cat("attention_f32", cache_suffix, " ("), splits, " key splits of ",
                     keys_per_split, extras, ") + attention_combine_f32"));
}

uint32_t decode_split_keys(uint64_t len, uint32_t wanted) {
  const uint64_t per_split = std::max<uint64_t>((len + 63) / 64, (len + wanted - 1) / wanted);
  return uint32_t(std::max<uint64_t>(32, (per_split + 15) / 16 * 16));
}

std::pair<uint32_t, uint32_t> step_key_splits(const StepSplitGroups& g, uint64_t len) {
  uint64_t keys = decode_split_keys(len, g.wanted);
  // At most the plan's splits (its partials): a longer split where rounding would give one more.
  if ((len + keys - 1) / keys > g.max_splits) keys = (len + g.max_splits - 1) / g.max_splits;
  return {uint32_t(keys), uint32_t((len + keys - 1) / keys)};
}

}  // namespace greta::vk
