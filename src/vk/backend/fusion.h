// The Vulkan backend's fusions: pattern matching over a plan's ops while a range of them is recorded. The plan, the
// CPU reference and the other backends are unchanged; only how the ops become dispatches changes. Decode (1 token a
// step) is a chain of small dependent dispatches, each costing a few microseconds of fixed time at the barrier
// before it, so fewer dependent stages is what makes it faster. Per llama layer:
//
//   unfused: attn_norm | q k v | rope_q rope_k | k_cache v_cache | attn (split, combine) | attn_output | residual |
//            ffn_norm | gate up | swiglu | down | residual                       (12 stages plus attention's second)
//   fused:   q k v (norm inside) | rope_kv | attn (split, combine) | attn_output (+= x) | gate up (norm inside) |
//            down (swiglu inside, += x)                                        (6 stages plus attention's second)
//
// The fusions (each can be turned off with GRETA_VK_FUSE, for measurements):
//   residual  matmul + the residual add of its product -> y += W x (every matmul kernel, prefill too)
//   norm      rmsnorm + the decode matvecs reading its output -> matvecs that normalize their input themselves; the
//             rmsnorm dispatch is dropped when nothing else reads its output before it is written again, else it
//             still runs, concurrently with the matvecs (they do not read its output)
//   rope_kv   rope_q + rope_k + k_cache [+ v_cache] of a decode step -> one rope_kv dispatch; with the per-head
//             attn_q_norm and attn_k_norm just before it (qwen3, qwen3moe, gemma3) -> one qk_norm_rope_kv dispatch
//   swiglu    swiglu (SiLU's, or gpt-oss's clamped one) + the decode matvec reading its output -> a matvec on
//             act(gate) * up; the swiglu dispatch is dropped (or kept, as for the norm, when its output is read
//             elsewhere and does not alias gate or up)
//   norm and swiglu also feed decode expert matmuls on the block-wise kernels: a MoE layer's ffn_norm goes into the
//   router and the gate and up projections (and is dropped), its GLU into the down projection; with int8 activations
//   the experts' quantized input is then made beside the router (vk_backend.cpp, OpEncoder::q8_prefetch), and the
//   combine that adds into the residual stream also makes the next layer's int8 input (quantize_q8_combine)
//   bias      decode matvec + the bias add of its product -> y = W x + b (gpt-oss and qwen2's projection biases),
//             with the residual fusion also + the residual add after it -> y += W x + b
//   route     a MoE router's decode matvec + the route over its logits -> the matvec's last workgroup routes
//   glu_out   (with swiglu) the decode gate and up projections whose GLU the down projection reads, on the int8
//             matvecs (dense or MoE experts): they make the down projection's int8 input too, and its quantizer
//             stage goes (matvec_block.comp's GLU_OUT)
// The residual fusion also takes moe_combine + the residual add of its output -> the combine adds into x itself.
// A fusion needs all its ops inside the recorded range, so verify mode's single-op ranges run every op on its own
// and still check each against the CPU. Decode means at most 4 tokens a step with the matvec kernels; prefill plans
// only get the residual fusion.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/plan.h"
#include "vk/backend/encoder.h"

namespace greta::vk {

enum FusionBits : unsigned {
  kFuseResidual = 1u,
  kFuseNorm = 2u,
  kFuseRopeKv = 4u,
  kFuseSwiglu = 8u,
  kFuseBias = 16u,
  kFuseRoute = 32u,
  kFuseGluOut = 64u,
  kFuseNormOut = 128u,  // encode time (vk_backend.cpp): a residual-adding matvec makes the next rmsnorm's int8 rows
  kFuseRopeOut = 256u,  // encode time: with rope_kv, the Q, K and V matvecs do the rope_kv record's work
  kFuseAll = 511u,
};

// The switch GRETA_VK_FUSE=all|none|LIST (LIST: comma-separated residual,norm,rope_kv,swiglu,bias,route,glu_out,
// norm_out,rope_out) overrides `chosen` when set (experiment_switches.h).
unsigned fusions_from_switches(unsigned chosen, const ExperimentSwitches& switches);

// How one op of the range is recorded.
struct OpRecord {
  enum class Kind {
    op,       // on its own (its encode_* function)
    matmul,   // a MatMul with fusions: `matmul` (encode_matvec when it has a fused input, else encode_matmul)
    rope_kv,  // the first op of a fused rope_q + rope_k + kv write: `rope_kv`
    combine_residual,  // moe_combine adding into the residual stream: `combine` (its out retargeted to x)
    moe_matmul,        // an expert matmul making its input itself: `moe` (encode_moe_matmul's fused input)
    absorbed  // done by op `into` (or, for a dropped rmsnorm / swiglu, made unnecessary by it)
  };
  Kind kind = Kind::op;
  size_t into = 0;
  MatmulArgs matmul{};
  std::optional<RopeKvArgs> rope_kv;
  std::optional<engine::MoeCombineOp> combine;
  std::optional<MoeFusedInput> moe;
  // The plan buffers the recorded dispatches read and write (for the barriers between dependent ops).
  std::vector<engine::BufferId> reads, writes;
};

// Records for ops [range.begin, range.end) of `plan` (index i - range.begin), with the fusions in `fusions`.
// `matmul` is the backend's matmul-kernel option (fusions into a matvec need the matvec kernel).
// `moe_takes_input`: whether an expert matmul runs on kernels that can make a fused input (the backend knows its
// weight's type and layout; moe_matvec_takes_input).
using MoeInputCheck = std::function<bool(const engine::MoeMatMulOp&)>;
std::vector<OpRecord> plan_records(const engine::Plan& plan, engine::OpRange range, unsigned fusions,
                                   MatmulKernel matmul, const MoeInputCheck& moe_takes_input);

// The plan buffers (and how many of their elements, from the first) that the op of `rec` reads, and whose split-K
// partials it can add itself, writing the sums back (OpEncoder::flush_split_sums, take_split_sum): an rmsnorm over
// whole rows from row 0, a GLU's gate and up, rope_kv's q, k and v (with the per-head norms, or where the rotation
// covers whole heads). `op` is the plan's op of the record.
std::vector<OpEncoder::SumReader> split_sum_readers(const OpRecord& rec, const engine::OpVariant& op);

}  // namespace greta::vk
