// Synthetic-model generator: writes a random-weight llama / qwen2 / qwen3 / qwen3moe / gemma3 / phi3 / gpt-oss GGUF
// of any shape that llama.cpp and GRETA both load (benchmarks at 7B/8B scale without downloading weights; small models for tests).
//
// Weights: every matrix ~ N(0, 0.02) (an Irwin-Hall approximation: fast and bounded), norm weights ~ 1 + U(-0.1, 0.1),
// Q/K/V biases ~ N(0, 0.02). Each row's values come from its own generator seeded by (seed, tensor, row), so the
// file is identical whatever the thread count. Tensors are generated, quantized and streamed to disk a chunk of rows
// at a time: memory stays at a few chunk buffers however large the model.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/tensor_types.h"

namespace greta::model {

struct SynthOptions {
  std::string arch = "llama";  // llama | qwen2 | qwen3 | qwen3moe | gemma3 | phi3 | gpt-oss
  int64_t dim = 256;
  int64_t n_layers = 2;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 0;      // 0: n_heads
  int64_t head_dim = 0;        // 0: dim / n_heads
  int64_t ffn_dim = 512;
  int64_t context_length = 4096;
  float rope_base = 0;         // 0: the architecture's usual (llama 10000, qwen 1e6)
  bool tied_embeddings = false;
  // Mixture of experts (qwen3moe, gpt-oss): experts per layer, used per token, and each expert's FFN width.
  int64_t n_experts = 8, n_experts_used = 2, expert_ffn_dim = 0;  // 0: ffn_dim
  int64_t sliding_window = 0;  // gemma3, gpt-oss: 0 picks the architecture's usual (gemma3 512, gpt-oss 128)
  // Weight type of every matrix; norms, biases and routers stay F32. MXFP4 (gpt-oss's format) is for the expert
  // tensors: the other matrices are then Q8_0, as in the published gpt-oss files. `q4_k_m_mix` uses llama.cpp's Q4_K_M mix instead
  // (Q4_K, with Q6_K for output.weight and for attn_v / ffn_down in the layers llama.cpp gives more bits).
  GgmlType type = GgmlType::F16;
  bool q4_k_m_mix = false;
  uint64_t seed = 1;
  std::string vocab_from;      // GGUF (or .gguf.xz) whose tokenizer.* metadata is copied; vocab = its token count
  std::string name;            // general.name; empty: "synth-ARCH-dDIM"
  int threads = 0;             // 0: all hardware threads
  // Speed benchmarks of large shapes: each tensor's first chunk of rows (4 MiB) is generated and quantized, then
  // repeated to the tensor's end. The file's size, types and layout are those of a full synth; its values are periodic
  // (experts beyond the first chunk copy earlier ones). A 30 B-parameter Q4_K_M file takes seconds instead of minutes.
  bool repeat_first_chunk = false;
  std::function<void(uint64_t done_bytes, uint64_t total_bytes)> progress;  // optional, called between chunks
  // Optional, asked between rows (from the generator threads too): true stops the run, removes the partial file and
  // throws greta::Error. A Ctrl-C in `greta-vk synth` comes this way.
  std::function<bool()> should_stop;
};

// The largest file synthesize_model writes: above the largest published models in 16 bits (about 1.3 TB), so a shape
// beyond it is a mistake (a dimension typed with extra digits) rather than a benchmark.
constexpr uint64_t kMaxSynthFileBytes = uint64_t(2) << 40;

struct SynthSummary {
  uint64_t file_bytes = 0;
  uint64_t n_params = 0;
  int64_t vocab_size = 0;
  int n_fallback_tensors = 0;  // matrices whose row length is not a multiple of the type's block: stored as Q8_0/F16
                               // (IQ4_XS: as IQ4_NL, llama.cpp's fallback, when a multiple of 32)
};

// Parses a --type name: any ggml type name GRETA can quantize ("q4_k", "Q8_0", "f16", ...) or "q4_k_m".
void parse_synth_type(const std::string& name, SynthOptions& options);

// Validates the options (throws greta::Error naming the bad one), checks that the file is at most kMaxSynthFileBytes
// and fits in the free space where it goes (before writing any of it), and writes the model to `out_path` (through
// `out_path`.part, renamed at the end; removed on any error).
SynthSummary synthesize_model(const std::string& out_path, const SynthOptions& options);

}  // namespace greta::model
