#version 450
// Block-wise matrix-vector products for the quantized weight types (WTYPE_*): the fast decode path. Same contract
// as matvec.comp (y[t, out_row0 + r] = dot(weight row r, x[t, :]) for the `rows` rows bound at binding 0 and every
// token t, TOKENS per workgroup along y; row groups are a grid-stride loop) for rows whose length is a multiple of 32.
//
// Work split: a row is cut into slots of 8 elements (a quarter of a 32-element legacy block) or 16 (a sixteenth of a
// 256-element K-quant super-block); with int8 activations Q4_0, Q4_K, Q5_K and Q6_K take slots of 32 (MV_WIDE: a
// whole block, or 32 elements of a super-block), which halves the per-(row, token) conversions and scalings and the
// loads per weight byte (on the H200 a one-token 14336x4096 Q4_K matvec 24.7 -> 18.2 us with op_matvec.cpp's 64x4
// workgroups, the 8B's tg128 +26 %; docs/benchmarks.md). A workgroup of WG invocations (spec constant 0, a
// multiple of the subgroup size) owns ROWS consecutive rows (spec constant 1, <= 8) of TOKENS tokens (spec constant
// 4, below); invocation i takes slots i, i + WG, ... of all ROWS rows.
// Slots are numbered so that neighbouring invocations read neighbouring activations (a subgroup's vec4 loads cover
// whole 64- or 128-byte runs) and neighbouring weight bytes. Per slot an invocation loads its activations once
// (MV_NX vec4, reused by every row), then per row reads its code words and the scales they need with 32-bit loads
// (blocks of 18/22/34/110/210 bytes start at even bytes: a word that starts mid-word is put together from two; MXFP4's
// 17-byte blocks at any byte, through read_u32_unaligned; Q4_K's and Q5_K's 144/176-byte super-blocks in 16-byte
// loads), and
// adds scale * dot(codes, x) to an f32 partial sum. Codes become floats exactly through the 2^23 trick: the bits
// 0x4B000000 | byte are the float 2^23 + byte, so one OR and one subtraction (which also removes the code's offset,
// e.g. the 8 of Q4_0) replace an integer-to-float conversion. The (row, token) partial sums are reduced in one
// butterfly of shuffles over the subgroup (ROW_GATHER below), then across subgroups through shared memory.
//
// Results equal the reference's f32 dot products up to rounding (sums taken in another order, scales applied per
// block or sub-block); tests/vk/vk_ops_test.cpp holds them to NMSE <= 1e-9.
//
// Two activation forms, one kernel body (the per-type code, matvec_slots.glsl, is written once against MvAct /
// mv_dot):
//   f32 (default)  x4[] holds the token rows as f32; codes become floats through the 2^23 trick above.
//   X_Q8           the input was quantized by quantize_q8.comp (int8 codes, one f32 scale d per 32 elements, x =
//                  d * code; the row layout of q8_rows.glsl). Per
//                  4 codes a slot takes one integer dot product (dotPacked4x8EXT, GL_EXT_integer_dot_product) and
//                  the code sum (for the offsets and mins), converts once and multiplies by the block's scale:
//                  about a quarter of the f32 form's instructions per weight byte, which is what bounds the f32
//                  form (docs/benchmarks.md). Results equal the f32 form's on the quantized input, up to rounding.
//
// MOE (moe_matvec_block_<type>, moe_matvec_q8_<type>): the decode expert matmul (engine::MoeMatMulOp). Workgroup
// y is slot y (token y / k, or slot y's own input row with per_slot); the bound weight holds n_experts * rows rows and
// the slot's expert e = experts[y] selects rows e * rows .. + rows, so a step reads the chosen experts' rows only;
// y[slot, r] = dot(row, x) (+ bias[e, r]). TOKENS is 1, plain input only.
//
// GLU_OUT (spec constant 8, X_Q8 with TOKENS 1: 2 SiLU, 3 gpt-oss's clamped SwiGLU; 0 off): a decode step's gate and
// up projections (dense, or MOE's experts), two dispatches of one stage, also make the down projection's int8 input
// act(gate, up) (quantize_q8.comp's layout, one row of `rows` per token or slot), so no quantizer stage sits between
// them and the down projection. GLU_IS_UP (spec constant 9) says which of the pair this dispatch is; the Pair binding
// holds the other's output. Every row group, after writing its rows, makes them visible device-wide and counts itself
// in the counter of its 32-row block (ROWS divides 32): the last of the block's GLU_COUNT row groups (spec constant
// 10: both dispatches' row groups of a block), of either dispatch, reads the block's 32 gate and up values back
// (coherent), applies the GLU and writes the block's codes and scale, then returns the counter to 0 for the next step.
// A stage between two barriers costs a few microseconds of a decode layer whatever its work (docs/benchmarks.md).
//
// NORM_OUT (push constant norm_out, X_Q8 without MOE, with the residual add, rows from 0, ROWS dividing 32): a decode step's
// projection that adds into the residual stream (attention output, down projection) also makes the next rmsnorm's
// int8 rows (quantize_q8.comp's IN_RMSNORM output; the norm weight at Aux, eps in pc.eps) in the GLU_OUT bindings,
// so no quantizer stage sits before the next layer's (or the output's) first matvecs. Int8 codes of a block do not
// depend on the row's 1 / rms, only its scale does: so the last row group of each 32-row block quantizes the block of
// x * weight and leaves its sum of squares and maximum; the last such block of the token group then sums the blocks'
// squares (in block order: the same bits every run) and writes every block's scale max * (1 / rms) / 127. Counters
// (binding GLU_BINDING_COUNTERS, uint words; G token groups, B = rows / 32 blocks): [G * B] per (group, block), [G]
// per group, then per (token, block) the sum of squares and the maximum as float bits (norm_out_words on the host).
// The host uses it at one token (norm_out_usable: at 4 the chain of fences and round trips cost more than the stage).
// A push constant, as ROPE_OUT's part (below), so that the projections share one binary.
//
// ROPE_OUT (push constant rope_part, X_Q8 without MOE; ROWS even): a decode step's Q, K and V projections also do
// what rope_kv.comp would do after them (so its stage goes): Q's and K's rows rotated in adjacent pairs (2i, 2i + 1)
// of each head's first rope_dims dims (rope.glsl's rotation, the same bits), K's rotated rows and V's rows appended
// to the KV cache at the token's cache row (f16 pairs packed in one word, or f32). A pair's two rows are in one row
// group: each invocation that writes a row also adds up its partner's partial sums (no extra barrier). A push
// constant, not a spec constant, so that Q, K and V run the very binary that gate and up (and, at other shapes, the
// others) run: at 4 tokens these binaries are about 28 KiB, and the first dispatch of one not run since the layer
// before paid about 5 us on the H200 (a cold instruction cache; docs/benchmarks.md).
//
// Fused input (spec constant 3, INPUT), as in matvec.comp (f32 form only: X_Q8's quantizer applies it): IN_RMSNORM reads the un-normalized row x_row0 + t and the
// norm weight (aux4), takes dot(w, x * weight) and the row's sum of squares in one pass and scales the reduced dot
// product by 1 / sqrt(sum / cols + eps); IN_SWIGLU reads the gate (x4) and up (aux4) and uses silu(gate) * up, and
// IN_SWIGLU_OAI gpt-oss's clamped SwiGLU of them (glu.glsl; alpha and limit are spec constants 6 and 7).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#if defined(X_Q8)
#extension GL_EXT_integer_dot_product : require
#endif
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 2;
// y += W x (a fused residual add) instead of y = W x; the int8 form takes it as a push constant (MV_ACCUMULATE).
layout(constant_id = 2) const bool ACCUMULATE = false;
const uint IN_PLAIN = 0, IN_RMSNORM = 1, IN_SWIGLU = 2, IN_SWIGLU_OAI = 3;
layout(constant_id = 3) const uint INPUT = IN_PLAIN;
layout(constant_id = 6) const float GLU_ALPHA = 1.702;  // IN_SWIGLU_OAI
layout(constant_id = 7) const float GLU_LIMIT = 7.0;
layout(binding = 0) readonly buffer WeightBuf { uint weight_words[]; };
#if defined(X_Q8)
layout(binding = 1) readonly buffer X { uint xq[]; };  // quantize_q8.comp's rows: codes, then scales
#else
layout(binding = 1) readonly buffer X { vec4 x4[]; };
#endif
#if defined(X_Q8)
layout(binding = 2) coherent buffer Y { float y[]; };  // coherent: GLU_OUT reads other workgroups' rows back
#else
layout(binding = 2) buffer Y { float y[]; };
#endif
layout(binding = 3) readonly buffer Aux { vec4 aux4[]; };  // IN_RMSNORM: norm weight [cols]; IN_SWIGLU: up; else unused
#if defined(MOE)
layout(binding = 4) readonly buffer Experts { int experts[]; };  // [slots]
layout(binding = 5) readonly buffer Bias { float bias[]; };      // [n_experts, rows] when has_bias
#define GLU_BINDING_PAIR 6
#define GLU_BINDING_COUNTERS 7
#define GLU_BINDING_Q8 8
#else
// BIAS: y = W x + bias (the bias add after the matmul, fused by fusion.cpp); bias indexed by the output row.
layout(constant_id = 5) const bool BIAS = false;
layout(binding = 4) readonly buffer Bias { float bias[]; };      // [out rows] when BIAS
#define GLU_BINDING_PAIR 5
#define GLU_BINDING_COUNTERS 6
#define GLU_BINDING_Q8 7
#endif
#if defined(X_Q8)
layout(constant_id = 8) const uint GLU_OUT = 0;
layout(constant_id = 9) const bool GLU_IS_UP = false;
layout(constant_id = 10) const uint GLU_COUNT = 2;
#if !defined(MOE)
// ROPE_OUT (see the top), pc.rope_part: 1 rotate (Q), 2 rotate and append to the cache (K), 3 append (V); 0 none.
const uint ROPE_Q = 1, ROPE_K = 2, ROPE_V = 3;
layout(binding = 8) readonly buffer Positions { int positions[]; };  // per token
layout(binding = 9) readonly buffer InvFreq { float inv_freq[]; };   // per pair, then the magnitude scale (rope.glsl)
layout(binding = 10) readonly buffer CacheRows { int cache_rows[]; };  // per token: its row of the KV cache
layout(binding = 11) writeonly buffer Cache { uint cache_words[]; };  // [cache rows, rows]: f16 pairs or f32
#endif
// GLU_OUT: the other projection's [tokens or slots, rows]; per (token or slot, block) counters, 0 between
// steps; the down projection's int8 rows. Stand-ins without GLU_OUT.
layout(binding = GLU_BINDING_PAIR) coherent readonly buffer Pair { vec4 pair4[]; };
layout(binding = GLU_BINDING_COUNTERS) coherent buffer GluCounters { uint glu_counters[]; };
layout(binding = GLU_BINDING_Q8) writeonly buffer GluQ8 { uint glu_q8[]; };
#endif
layout(push_constant) uniform Push {
  uint row_bytes; uint rows; uint cols; uint out_row0; uint out_stride;
  uint x_row0;  // token t reads row x_row0 + t of x
  float eps;    // IN_RMSNORM
#if defined(MOE)
  uint k; uint per_slot; uint has_bias;
#elif defined(X_Q8)
  uint head_dim; uint rope_dims; uint rope_part; uint cache_f16;  // ROPE_OUT
  uint accumulate;  // y += W x (MV_ACCUMULATE below; the spec constant ACCUMULATE stays false)
  uint norm_out;    // NORM_OUT (see the top)
#endif
} pc;
// With int8 activations the residual add is a push constant, so that a layer's projections that add into the stream
// (attention output, down) run the same binary as those that do not: at 4 tokens a binary is about 28 KiB, and one
// not run since the layer before starts with a cold instruction cache (about 5 us a dispatch on the H200).
#if defined(X_Q8) && !defined(MOE)
#define MV_ACCUMULATE (pc.accumulate != 0u)
#else
#define MV_ACCUMULATE false
#endif
#include "dequant.glsl"
#include "glu.glsl"
#if defined(X_Q8)
#include "q8_rows.glsl"
#endif

const uint MAX_PAIRS = 16;  // ROWS * TOKENS (the host keeps to it)
const uint MAX_SUBGROUPS = 64;
shared float partial[MAX_PAIRS * MAX_SUBGROUPS];
shared float partial_ss[MAX_SUBGROUPS];  // IN_RMSNORM: the sum of squares per subgroup

#if !defined(X_Q8)
// The activations at vec4 index i of the row whose first vec4 is x4_base; IN_RMSNORM adds their squares to ss.
vec4 mv_activation(uint x4_base, uint i, inout float ss) {
  const vec4 v = x4[x4_base + i];
  if (INPUT == IN_RMSNORM) {
    ss += dot(v, v);
    return v * aux4[i];
  }
  if (INPUT == IN_SWIGLU) return glu_silu(v, aux4[x4_base + i]);
  if (INPUT == IN_SWIGLU_OAI) return glu_oai(v, aux4[x4_base + i], GLU_ALPHA, GLU_LIMIT);
  return v;
}
#endif

// ---- helpers ---------------------------------------------------------------------------------------------------------

// The 4 bytes of w (each < 2^23) as floats minus `bias`, exactly: float bits 0x4B000000 | b are 2^23 + b.
vec4 mv_bytes(uint w, float bias) {
  return uintBitsToFloat(((uvec4(w) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu) | 0x4B000000u) - (8388608.0 + bias);
}
// v < 2^23 as a float, the same way.
float mv_float(uint v) { return uintBitsToFloat(v | 0x4B000000u) - 8388608.0; }

// Bits 0..3 of n spread to bit 0 of bytes 0..3 (the four products do not overlap, so no carries).
uint mv_spread4(uint n) { return (n * 0x00204081u) & 0x01010101u; }

// The f16 at even byte b.
float mv_f16(uint b) { return unpackHalf2x16(weight_words[b >> 2] >> ((b & 2u) * 8u)).x; }

// Bytes b..b+3 / b..b+7 (b even), reading only the words that hold them.
uint mv_load4(uint b) {
  const uint w = b >> 2, v0 = weight_words[w];
  if ((b & 2u) == 0u) return v0;
  return (v0 >> 16) | (weight_words[w + 1u] << 16);
}
uvec2 mv_load8(uint b) {
  const uint w = b >> 2;
  const uint v0 = weight_words[w], v1 = weight_words[w + 1u];
  if ((b & 2u) == 0u) return uvec2(v0, v1);
  const uint v2 = weight_words[w + 2u];
  return uvec2((v0 >> 16) | (v1 << 16), (v1 >> 16) | (v2 << 16));
}

// Byte n (0..7) of the 8 bytes in v.
uint mv_byte(uvec2 v, uint n) { return (v[n >> 2] >> (8u * (n & 3u))) & 0xFFu; }

float mv_sum(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

// ---- slot layout and activations -----------------------------------------------------------------------------------
//   MV_SLOT_SHIFT                       log2(elements per slot)
//   MV_NX                               4-element groups of activations per slot (a vec4 in x4, a code word in xq)
//   uint mv_x4(s, j)                    index (within the token's row, in 4-element groups) of slot s's j-th group
#if defined(WTYPE_Q4_0) || defined(WTYPE_Q4_1) || defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1) || defined(WTYPE_Q8_0) || \
    defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS) || defined(WTYPE_MXFP4)
// Legacy 32-element blocks (and the table formats, whose codes are laid out as Q4_0's in every block of 32; IQ4_XS's
// super-block holds 8 of them): slot s = quarter k = s % 4 of block u = s / 4; group 0 = elements 4k..4k+3 of the block,
// group 1 = elements 16 + 4k .. 16 + 4k + 3 (for the 4-bit types the low and high nibbles of code word k).
// Q4_0 with int8 activations (MV_WIDE): slot s = block s, group j = elements 4j .. 4j + 3 (the low nibbles of code
// word j < 4, then the high nibbles of word j - 4): one conversion and scaling per (row, token) and block, not four.
// (Q8_0 the same way lost at 2 and 4 tokens on the H200: docs/benchmarks.md.)
#define MV_LEGACY
#define MV_NB 1
#if defined(X_Q8) && defined(WTYPE_Q4_0)
#define MV_WIDE
#define MV_SLOT_SHIFT 5u
#define MV_NX 8
uint mv_x4(uint s, uint j) { return 8u * s + j; }
#else
#define MV_SLOT_SHIFT 3u
#define MV_NX 2
uint mv_x4(uint s, uint j) { return 8u * (s >> 2) + (s & 3u) + 4u * j; }
#endif
#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// Slot s: MV_NW consecutive code words of a 64-element chunk (sub-blocks 2c and 2c + 1 as the low and high nibbles of
// qs[32c ..][32]), MV_SPC = 8 / MV_NW slots per chunk: super-block s / (4 MV_SPC), chunk c = (s / MV_SPC) % 4,
// k = s % MV_SPC, code words MV_NW k .. + MV_NW - 1. Groups j < MV_NW: elements 64c + 4 (MV_NW k + j) .. + 3 (the
// low nibbles of word MV_NW k + j, sub-block 2c); group MV_NW + j: the same 32 elements further (its high nibbles,
// sub-block 2c + 1). With int8 activations (MV_WIDE) a slot is 4 words, 32 elements: per (row, token) one
// conversion and scaling per 16 elements of each sub-block (it was 8), and the codes, scales and (Q5_K) high bits
// each one 16-byte load. With f32 activations 2 words, as 4 would hold 32 floats per token in registers.
#if defined(X_Q8)
#define MV_WIDE
#define MV_NW 4u
#define MV_SPC 2u
#define MV_SLOT_SHIFT 5u
#define MV_NX 8
#else
#define MV_NW 2u
#define MV_SPC 4u
#define MV_SLOT_SHIFT 4u
#define MV_NX 4
#endif
#define MV_NB 2
uint mv_x4(uint s, uint j) { return 16u * (s / MV_SPC) + MV_NW * (s % MV_SPC) + j % MV_NW + 8u * (j / MV_NW); }
#elif defined(WTYPE_Q2_K) || defined(WTYPE_Q3_K) || defined(WTYPE_Q6_K)
// 2-bit interleaving (quant_blocks.h): slot s of super-block s / 16: half h = (s / 8) % 2, n = s % 8: elements
// 128h + 32R + 4n .. + 3 for the runs R = 0..3, all in the code bytes 4n..4n+3 of the half (at shifts 2R for the
// 2-bit fields); group R holds run R. Sub-block of run R: 8h + 2R + n / 4.
// Q6_K with int8 activations (MV_WIDE, MV_Q6_RUNS): slot s = the row's 32-element block s, one run: R = s % 4 of
// half h = (s / 4) % 2 of super-block s / 8, elements 128h + 32R + l (l < 32), group j = elements 4j .. 4j + 3. Its
// two 16-element sub-blocks (8h + 2R and + 1) are MvAct's blocks 0 and 1 (a code sum each; both take the one
// activation block's scale), so a (row, token) pair takes one conversion and scaling per slot: the two sub-blocks'
// scales act on the integer sums (where slots of 8 elements from each of the 4 runs took four). A run's code bytes
// are ql[64h + 32(R % 2) + l] (nibble R / 2) and qh[32h + l] (bits 2R): neighbouring slots (R = 0..3) read the
// same qh words and R, R + 2 the same ql words, in the same load instruction.
#if defined(X_Q8) && defined(WTYPE_Q6_K)
#define MV_WIDE
#define MV_Q6_RUNS
#define MV_NB 2
#define MV_SLOT_SHIFT 5u
#define MV_NX 8
uint mv_x4(uint s, uint j) { return 8u * s + j; }
#else
#define MV_NB 4
#define MV_SLOT_SHIFT 4u
#define MV_NX 4
uint mv_x4(uint s, uint j) { return 32u * (s >> 3) + (s & 7u) + 8u * j; }
#endif
#else
#error "matvec_block.comp: quantized weight types only (f32/f16/bf16 use matvec.comp)"
#endif

#if defined(X_Q8) && defined(MV_WIDE)
// Q4_0, Q4_K, Q5_K and Q6_K slots take their code words in runs of 4 (groups 4r .. 4r + 3 at mv_x4(s, 4r), a multiple
// of 4): where rows are whole 16-byte words (cols % 128 == 0, as in every model's shapes) each run is one 16-byte
// load, not four of 4 bytes.
#define MV_RUN4
layout(binding = 1) readonly buffer XVec4 { uvec4 xq4[]; };
#endif

// A slot's activations, and what the per-type code does with them. Its groups lie in MV_NB 32-element activation
// blocks, MV_GPB = MV_NX / MV_NB consecutive groups each (group j in block j / MV_GPB).
//   float mv_dot_run(c, n, bias, a, j0)  sum over the groups j0 .. j0 + n - 1 (n <= 4, all of the slot's groups in
//                                        one block: X_Q8 subtracts bias times the block's code sum) of
//                                        (bytes of c[i] - bias) . group j0 + i, the bytes each < 128
//   float mv_dot(codes, bias, a, j)      the same for the one group j of a block
//   float mv_xsum_block(a, b)            the sum of the slot's groups in block b (what mins and offsets multiply)
const uint MV_GPB = MV_NX / MV_NB;
#if defined(X_Q8)
struct MvAct {
  uint q[MV_NX];   // 4 int8 codes per group
  float d[MV_NB];  // the block's scale
  int s[MV_NB];    // the sum of the slot's codes in the block
};
// The integer dot products of a block's groups are added before the one conversion and scaling, which a
// multi-token matvec repeats per row and token (H200, 14336x4096 Q4_K: 1 token 26.0 -> 25.0 us for two groups
// instead of one; docs/benchmarks.md).
int mv_idot_n(uvec4 c, uint n, const MvAct a, uint j0) {
  int q = 0;
  [[unroll]] for (uint i = 0; i < 4u; ++i)
    if (i < n) q += dotPacked4x8EXT(int(c[i]), int(a.q[j0 + i]));
  return q;
}
// The integer dot product of the 4 code words c with groups j0 .. j0 + 3.
int mv_idot(uvec4 c, const MvAct a, uint j0) { return mv_idot_n(c, 4u, a, j0); }
float mv_dot_run(uvec4 c, uint n, float bias, const MvAct a, uint j0) {
  const uint b = j0 / MV_GPB;
  return a.d[b] * float(mv_idot_n(c, n, a, j0) - int(bias) * a.s[b]);
}
float mv_xsum_block(const MvAct a, uint b) { return a.d[b] * float(a.s[b]); }
#else
struct MvAct {
  vec4 v[MV_NX];
};
float mv_dot_run(uvec4 c, uint n, float bias, const MvAct a, uint j0) {
  float r = 0.0;
  [[unroll]] for (uint i = 0; i < 4u; ++i)
    if (i < n) r += dot(mv_bytes(c[i], bias), a.v[j0 + i]);
  return r;
}
float mv_xsum_block(const MvAct a, uint b) {
  float r = 0.0;
  [[unroll]] for (uint i = 0; i < MV_GPB; ++i) r += mv_sum(a.v[b * MV_GPB + i]);
  return r;
}
#endif
float mv_dot(uint codes, float bias, const MvAct a, uint j) {
  return mv_dot_run(uvec4(codes, 0u, 0u, 0u), 1u, bias, a, j);
}
// Two groups j0, j0 + 1 of one block.
float mv_dot2(uint c0, uint c1, float bias, const MvAct a, uint j0) {
  return mv_dot_run(uvec4(c0, c1, 0u, 0u), 2u, bias, a, j0);
}

// ---- per type: matvec_slots.glsl (mv_xsum, MvRow, mv_row, mv_row_dot) ----------------------------------------
#include "matvec_slots.glsl"

// Several tokens per workgroup (spec constant 4, TOKENS, a power of two with ROWS * TOKENS <= MAX_PAIRS, plain input
// only): workgroup y takes tokens y * TOKENS .. + TOKENS - 1 and every slot's weight words are read once for all of
// them, and decoded once: mv_row per row, then mv_row_dot per (row, token) pair. (Left to the compiler, a decoding
// written per pair was not merged across tokens: splitting it took 14336x4096 Q4_K at 4 tokens from 34.1 to 30.0 us
// on the H200; docs/benchmarks.md.) So a step of B decode tokens reads and decodes the weights B / TOKENS times
// instead of B times. Each token's activations are
// loaded once per slot for the ROWS rows: more rows per workgroup spread those loads (and the code sums) over more
// dot products, which is what a multi-token step's cost per token comes down to (op_matvec.cpp). Per-(row, token)
// partial sums are named variables acc<row><token> (spec-constant conditions drop the unused ones) rather than an
// array indexed in loops bounded by ROWS: the H100 driver keeps such arrays in memory (see matmul_coopmat.comp). The
// pairs that exist: rows 0-1 with tokens 0..7, rows 2-3 with tokens 0..3, rows 4..7 with tokens 0-1.
layout(constant_id = 4) const uint TOKENS = 1;
#define ROW_LOAD(r) \
  MvRow w##r;       \
  if (r < ROWS) w##r = mv_row((expert_row0 + min(row0 + r, pc.rows - 1u)) * pc.row_bytes, s);
#define FOR_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define ROW_DOT(r, u) if (r < ROWS && u < TOKENS) acc##r##u += mv_row_dot(w##r, a##u, xsum##u);
#define ROW_REDUCE(r, u)                                                                         \
  if (r < ROWS && u < TOKENS) {                                                                  \
    const float v = subgroupAdd(acc##r##u);                                                      \
    if (subgroupElect()) partial[(r * TOKENS + u) * MAX_SUBGROUPS + gl_SubgroupID] = v;         \
  }
#define ROW_GATHER(r, u) \
  if (r < ROWS && u < TOKENS) red[r * TOKENS + u] = acc##r##u;
// The subgroup's sums of the NP = ROWS * TOKENS (rounded up to a power of two) accumulators into partial[], as one
// butterfly: at lane offset o each lane keeps half of its values (the lower or upper half, by its bit o) and adds
// its partner's copy of them, so NP values take NP - 1 shuffles where NP subgroupAdds took NP log2(subgroup size)
// (16 pairs at 4 tokens x 4 rows on 32 lanes: 16 shuffles instead of 80, and the 4-token binary 35 -> 24 KiB; on the
// H200 the 7B's S_TG at 4 sequences +16 %, at one +3 %: docs/benchmarks.md). Then lane L holds pair L / (size / NP)
// (or, below NP lanes, pairs i + (NP / size) L of its NP / size values). Needs whole subgroups (ROW_REDUCE else).
const uint NPAIRS = ROWS * TOKENS;
const uint NP = NPAIRS <= 1u ? 1u : NPAIRS <= 2u ? 2u : NPAIRS <= 4u ? 4u : NPAIRS <= 8u ? 8u : 16u;
#define RED_STEP(H)                                                  \
  if (NP >= 2u * H && o >= 1u) {                                     \
    const bool upper = (lane & o) != 0u;                             \
    [[unroll]] for (uint i = 0; i < H; ++i) {                        \
      const float send = upper ? red[i] : red[i + H];                \
      const float keep = upper ? red[i + H] : red[i];                \
      red[i] = keep + subgroupShuffleXor(send, o);                   \
    }                                                                \
    o >>= 1;                                                         \
  }
#define FOR_PAIRS(M)                                                                                     \
  M(0, 0) M(0, 1) M(0, 2) M(0, 3) M(0, 4) M(0, 5) M(0, 6) M(0, 7) M(1, 0) M(1, 1) M(1, 2) M(1, 3) M(1, 4) \
  M(1, 5) M(1, 6) M(1, 7) M(2, 0) M(2, 1) M(2, 2) M(2, 3) M(3, 0) M(3, 1) M(3, 2) M(3, 3) M(4, 0) M(4, 1) \
  M(5, 0) M(5, 1) M(6, 0) M(6, 1) M(7, 0) M(7, 1)
#define FOR_TOKENS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define DECLARE_ACC(r, u) float acc##r##u = 0.0;
// Token u's row of activations (past the last token of the group: the last one again, never used).
#if defined(X_Q8)
// Slot s's code words of the token row whose first word is `base`.
void mv_load_codes(uint base, uint s, inout MvAct a) {
#if defined(MV_RUN4)
  if ((pc.cols & 127u) == 0u) {  // base % 4 == 0
    [[unroll]] for (uint r = 0; r < MV_NX / 4u; ++r) {
      const uvec4 v = xq4[(base + mv_x4(s, 4u * r)) >> 2];
      a.q[4u * r] = v.x, a.q[4u * r + 1u] = v.y, a.q[4u * r + 2u] = v.z, a.q[4u * r + 3u] = v.w;
    }
    return;
  }
#endif
  [[unroll]] for (uint j = 0; j < MV_NX; ++j) a.q[j] = xq[base + mv_x4(s, j)];
}
#define TOKEN_BASE(u)                                                                   \
  const uint xq_base##u = q8_row_base(pc.x_row0 + t0 + min(u, TOKENS - 1u), pc.cols);   \
  const uint xd_base##u = xq_base##u + q8_scale_word(pc.cols, 0);
#define TOKEN_LOAD(u)                                                                              \
  MvAct a##u;                                                                                      \
  vec4 xsum##u = vec4(0.0);                                                                        \
  if (u < TOKENS) {                                                                                \
    mv_load_codes(xq_base##u, s, a##u);                                                            \
    [[unroll]] for (uint b = 0; b < MV_NB; ++b) {                                                  \
      a##u.d[b] = uintBitsToFloat(xq[xd_base##u + (mv_x4(s, b * MV_GPB) >> 3)]);                   \
      int code_sum = 0;                                                                            \
      [[unroll]] for (uint i = 0; i < MV_GPB; ++i)                                                 \
        code_sum += dotPacked4x8EXT(int(a##u.q[b * MV_GPB + i]), 0x01010101);                      \
      a##u.s[b] = code_sum;                                                                        \
    }                                                                                              \
    xsum##u = mv_xsum(a##u);                                                                       \
  }
#else
#define TOKEN_BASE(u) const uint x4_base##u = (pc.x_row0 + t0 + min(u, TOKENS - 1u)) * (pc.cols >> 2);
#define TOKEN_LOAD(u)                                                                                     \
  MvAct a##u;                                                                                             \
  vec4 xsum##u = vec4(0.0);                                                                               \
  if (u < TOKENS) {                                                                                       \
    [[unroll]] for (uint j = 0; j < MV_NX; ++j) a##u.v[j] = mv_activation(x4_base##u, mv_x4(s, j), ss);  \
    xsum##u = mv_xsum(a##u);                                                                              \
  }
#endif

#if defined(X_Q8)
shared bool glu_is_last;
shared float glu_block_max[8];

// GLU_OUT: called by every row group after writing rows row0 .. row0 + ROWS - 1 of its output row (TOKENS is 1):
// workgroup y writes row y of the outputs (MOE: slot y). Invocation i < 8 of the block's last row group takes elements
// 4 i .. 4 i + 3 of the block.
void glu_out_block(uint row0) {
  const uint tid = gl_LocalInvocationID.x, block = row0 >> 5, blocks = pc.rows >> 5, t = gl_WorkGroupID.y;
  const uint counter = t * blocks + block;
  memoryBarrierBuffer();  // this row group's rows are visible before it is counted
  barrier();
  if (tid == 0) glu_is_last = atomicAdd(glu_counters[counter], 1u) == GLU_COUNT - 1u;
  barrier();
  if (!glu_is_last) return;
  memoryBarrierBuffer();
  const uint at = t * pc.out_stride + 32u * block + 4u * tid;  // the rows start at 0 (out_row0 0)
  vec4 act = vec4(0.0);
  if (tid < 8u) {
    const vec4 own = vec4(y[at], y[at + 1u], y[at + 2u], y[at + 3u]), other = pair4[at >> 2];
    const vec4 gate = GLU_IS_UP ? other : own, up = GLU_IS_UP ? own : other;
    act = GLU_OUT == IN_SWIGLU ? glu_silu(gate, up) : glu_oai(gate, up, GLU_ALPHA, GLU_LIMIT);
    const vec4 m4 = abs(act);
    glu_block_max[tid] = max(max(m4.x, m4.y), max(m4.z, m4.w));
  }
  barrier();
  if (tid < 8u) {
    float m = 0.0;
    for (uint i = 0; i < 8u; ++i) m = max(m, glu_block_max[i]);
    const uint base = q8_row_base(t, pc.rows), g = 8u * block + tid;  // 4-element group within the row
    glu_q8[base + g] = q8_pack(act, m);
    if (tid == 0u) {
      glu_q8[base + q8_scale_word(pc.rows, g)] = q8_scale_bits(m);
      glu_counters[counter] = 0u;  // all of the block's row groups have counted
    }
  }
}

#if !defined(MOE)
#include "rope.glsl"

// ROPE_OUT, after the reduction: invocation tid < ROWS * TOKENS, whose row exists, has the sum v of row row0 + r
// (r = tid / TOKENS) for token t0 + u (u = tid % TOKENS); its pair's other row r ^ 1 is in the same row group, so
// it adds that row's partial sums itself (the same order, so the same bits as the invocation that owns it) rather
// than waiting at a barrier for them.
void rope_out(uint row0, uint t0, float v) {
  const uint tid = gl_LocalInvocationID.x, r = tid / TOKENS, u = tid % TOKENS, t = t0 + u;
  const uint row = row0 + r, d = row % pc.head_dim, part = pc.rope_part;
  float partner = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) partner += partial[((r ^ 1u) * TOKENS + u) * MAX_SUBGROUPS + i];
  vec2 pair = (d & 1u) == 0u ? vec2(v, partner) : vec2(partner, v);  // rows 2i, 2i + 1 of the head
  if (part != ROPE_V && d < pc.rope_dims)
    pair = rope_rotate(pair.x, pair.y, positions[t], inv_freq[d >> 1], inv_freq[pc.rope_dims >> 1]);
  const float out_v = (d & 1u) == 0u ? pair.x : pair.y;
  y[t * pc.out_stride + pc.out_row0 + row] = out_v;
  if (part != ROPE_Q) {
    const uint at = uint(cache_rows[t]) * pc.rows + row;
    if (pc.cache_f16 == 0u) cache_words[at] = floatBitsToUint(out_v);
    else if ((d & 1u) == 0u) cache_words[at >> 1] = packHalf2x16(pair);
  }
}

shared bool norm_is_last;
shared float norm_max[32], norm_ss[32];  // 8 invocations per token, TOKENS <= 4
shared float norm_group_ss[4 * MAX_SUBGROUPS];  // per token, per subgroup

// NORM_OUT: called by every row group after adding rows row0 .. row0 + ROWS - 1 into the stream (see the top).
// Invocation i < 8 TOKENS of a block's last row group takes token t0 + i / 8, elements 4 (i % 8) .. + 3 of the block.
void norm_out_block(uint row0) {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint blocks = pc.rows >> 5, block = row0 >> 5, group = gl_WorkGroupID.y, t0 = group * TOKENS;
  const uint block_counter = group * blocks + block, group_counter = gl_NumWorkGroups.y * blocks + group;
  const uint sums = gl_NumWorkGroups.y * (blocks + 1u);  // first word of the (token, block) partials
  memoryBarrierBuffer();  // this row group's rows are visible before it is counted
  barrier();
  if (tid == 0u) norm_is_last = atomicAdd(glu_counters[block_counter], 1u) == 32u / ROWS - 1u;
  barrier();
  if (!norm_is_last) return;
  memoryBarrierBuffer();
  const uint u = tid >> 3, j = tid & 7u;
  vec4 a = vec4(0.0);
  if (tid < 8u * TOKENS) {
    const uint at = (t0 + u) * pc.out_stride + 32u * block + 4u * j;
    const vec4 x = vec4(y[at], y[at + 1u], y[at + 2u], y[at + 3u]);
    a = x * aux4[8u * block + j];
    const vec4 m4 = abs(a);
    norm_max[tid] = max(max(m4.x, m4.y), max(m4.z, m4.w));
    norm_ss[tid] = dot(x, x);
  }
  barrier();
  if (tid < 8u * TOKENS) {
    float m = 0.0, ss = 0.0;
    for (uint i = 0; i < 8u; ++i) m = max(m, norm_max[8u * u + i]), ss += norm_ss[8u * u + i];
    glu_q8[q8_row_base(t0 + u, pc.rows) + 8u * block + j] = q8_pack(a, m);
    if (j == 0u) {
      const uint p = sums + 2u * ((t0 + u) * blocks + block);
      glu_counters[p] = floatBitsToUint(ss);
      glu_counters[p + 1u] = floatBitsToUint(m);
    }
  }
  memoryBarrierBuffer();  // the block's codes and partials are visible before it is counted
  barrier();
  if (tid == 0u) {
    glu_counters[block_counter] = 0u;  // all of the block's row groups have counted
    norm_is_last = atomicAdd(glu_counters[group_counter], 1u) == blocks - 1u;
  }
  barrier();
  if (!norm_is_last) return;
  memoryBarrierBuffer();
  // Every token's block sums at once (one round trip, not one per token), then every scale.
  float ss[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint b = tid; b < blocks; b += wg)
    [[unroll]] for (uint u = 0; u < 4u; ++u)
      if (u < TOKENS) ss[u] += uintBitsToFloat(glu_counters[sums + 2u * ((t0 + u) * blocks + b)]);
  [[unroll]] for (uint u = 0; u < 4u; ++u)
    if (u < TOKENS) {
      const float v = subgroupAdd(ss[u]);
      if (subgroupElect()) norm_group_ss[u * MAX_SUBGROUPS + gl_SubgroupID] = v;
    }
  barrier();
  float inv_rms[4];
  [[unroll]] for (uint u = 0; u < 4u; ++u) {
    float total = 0.0;
    if (u < TOKENS)
      for (uint i = 0; i < gl_NumSubgroups; ++i) total += norm_group_ss[u * MAX_SUBGROUPS + i];
    inv_rms[u] = inversesqrt(total / float(pc.rows) + pc.eps);
  }
  for (uint b = tid; b < blocks; b += wg)
    [[unroll]] for (uint u = 0; u < 4u; ++u)
      if (u < TOKENS) {
        const float m = uintBitsToFloat(glu_counters[sums + 2u * ((t0 + u) * blocks + b) + 1u]);
        glu_q8[q8_row_base(t0 + u, pc.rows) + q8_scale_word(pc.rows, 8u * b)] = q8_scale_bits(m * inv_rms[u]);
      }
  if (tid == 0u) glu_counters[group_counter] = 0u;
}
#endif
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
#if defined(MV_HAS_LUT)
  mv_lut_init();
#endif
#if defined(MOE)
  const uint slot = gl_WorkGroupID.y, expert = uint(experts[slot]);
  const uint t0 = pc.per_slot != 0 ? slot : slot / pc.k;  // the slot's input row
  const uint expert_row0 = expert * pc.rows;
#else
  const uint t0 = gl_WorkGroupID.y * TOKENS;
  const uint expert_row0 = 0;
#endif
  // Each token's first activation (and, for X_Q8, first scale) word, once: adding cols / 4 in every scale load's
  // address instead cost 3 % of a 7B Q4_0 decode step on the H100 (tg128 309 -> 299 tok/s).
  FOR_TOKENS(TOKEN_BASE)
  const uint slots = pc.cols >> MV_SLOT_SHIFT;
  const uint row_groups = (pc.rows + ROWS - 1) / ROWS;
  for (uint rg = gl_WorkGroupID.x; rg < row_groups; rg += gl_NumWorkGroups.x) {
    const uint row0 = rg * ROWS;
    FOR_PAIRS(DECLARE_ACC)
    float ss = 0.0;
    for (uint s = tid; s < slots; s += wg) {
      FOR_TOKENS(TOKEN_LOAD)
      // Rows past the end (the last group) repeat the last row; their sums are not written.
      FOR_ROWS(ROW_LOAD)
      FOR_PAIRS(ROW_DOT)
    }
    const uint sgs = gl_SubgroupSize;
    if (wg % sgs == 0u) {  // whole subgroups
      const uint lane = gl_SubgroupInvocationID;
      float red[16];
      [[unroll]] for (uint i = 0; i < 16u; ++i) red[i] = 0.0;
      FOR_PAIRS(ROW_GATHER)
      uint o = sgs >> 1;
      RED_STEP(8u) RED_STEP(4u) RED_STEP(2u) RED_STEP(1u)
      for (; o >= 1u; o >>= 1) red[0] += subgroupShuffleXor(red[0], o);
      const uint lanes_per_pair = max(sgs / NP, 1u), per_lane = max(NP / sgs, 1u);
      if (lane % lanes_per_pair == 0u)
        [[unroll]] for (uint i = 0; i < 16u; ++i) {
          const uint p = i + per_lane * (lane / lanes_per_pair);
          if (i < per_lane && p < NPAIRS) partial[p * MAX_SUBGROUPS + gl_SubgroupID] = red[i];
        }
    } else {
      FOR_PAIRS(ROW_REDUCE)
    }
    if (INPUT == IN_RMSNORM) {
      const float v = subgroupAdd(ss);
      if (subgroupElect()) partial_ss[gl_SubgroupID] = v;
    }
    barrier();
    const uint r = tid / TOKENS, u = tid % TOKENS;
    float v = 0.0;
    if (tid < ROWS * TOKENS && row0 + r < pc.rows) {
      for (uint i = 0; i < gl_NumSubgroups; ++i) v += partial[tid * MAX_SUBGROUPS + i];
      if (INPUT == IN_RMSNORM) {
        float sum_sq = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; ++i) sum_sq += partial_ss[i];
        v *= inversesqrt(sum_sq / float(pc.cols) + pc.eps);
      }
#if defined(MOE)
      if (pc.has_bias != 0) v += bias[expert_row0 + row0 + r];
      y[slot * pc.out_stride + row0 + r] = v;
#else
      if (BIAS) v += bias[pc.out_row0 + row0 + r];
      const uint at = (t0 + u) * pc.out_stride + pc.out_row0 + row0 + r;
#if defined(X_Q8)
      if (pc.rope_part != 0u)
        rope_out(row0, t0, v);
      else
#endif
        y[at] = ACCUMULATE || MV_ACCUMULATE ? y[at] + v : v;
#endif
    }
#if defined(X_Q8)
    if (GLU_OUT != 0) glu_out_block(row0);
#if !defined(MOE)
    if (pc.norm_out != 0u) norm_out_block(row0);
#endif
#endif
    barrier();  // partial[] is reused by the next row group
  }
}
