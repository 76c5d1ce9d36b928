#include "model/synth.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/quants.h"

namespace greta::model {

namespace {

enum class Init { Matrix, Norm, Bias };

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order
  GgmlType type;
  Init init;
};

constexpr size_t k_chunk_bytes = size_t(32) << 20;  // output bytes generated per parallel step
constexpr size_t k_repeated_chunk_bytes = size_t(4) << 20;  // with repeat_first_chunk: the part of a tensor generated
constexpr float k_weight_std = 0.02f;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// xorshift64* : small, fast, good enough for synthetic weights.
struct RowRng {
  uint64_t s;
  explicit RowRng(uint64_t seed) : s(splitmix64(seed) | 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
};

// Fills one row. Matrix/bias values: Irwin-Hall sum of four 16-bit uniforms, scaled to unit variance, times 0.02.
void fill_row(Init init, uint64_t seed, size_t tensor_index, uint64_t row, float* out, int64_t n) {
  RowRng rng(seed ^ splitmix64((uint64_t(tensor_index) << 40) ^ row));
  if (init == Init::Norm) {
    for (int64_t i = 0; i < n; ++i) out[i] = 1.f + 0.1f * (float((rng.next() >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f);
    return;
  }
  // each u = (x + 0.5) / 65536 has mean 1/2, variance 1/12: (sum of 4 - 2) * sqrt(3) has variance 1
  const float scale = k_weight_std * std::sqrt(3.f) / 65536.f;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = rng.next();
    float s = float((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) + 2.f;  // + 4 * 0.5
    out[i] = (s - 2.f * 65536.f) * scale;
  }
}

uint32_t llama_file_type(GgmlType t, bool q4_k_m) {
  if (q4_k_m) return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 11;  // Q3_K_S
    case GgmlType::Q4_K: return 14;  // Q4_K_S
    case GgmlType::Q5_K: return 16;  // Q5_K_S
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::BF16: return 32;
    case GgmlType::MXFP4: return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    default: return 0;
  }
}

// llama.cpp's use_more_bits(): the first and last eighth of the layers, and every third one in between.
bool use_more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

void validate(const SynthOptions& o) {
  auto in_range = [](const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail("", what, " = ", v, " is outside [", lo, ", ", hi, "]");
  };
  static const char* const kArchs[] = {"llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3", "gpt-oss"};
  if (std::find(std::begin(kArchs), std::end(kArchs), o.arch) == std::end(kArchs))
    fail("unsupported architecture '", o.arch, "' (llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss)");
  if (o.arch == "qwen3moe" || o.arch == "gpt-oss") {
    in_range("--experts", o.n_experts, 1, 1024);
    in_range("--experts-used", o.n_experts_used, 1, o.n_experts);
    in_range("--expert-ffn", o.expert_ffn_dim, 0, 1 << 18);
  }
  in_range("--sliding-window", o.sliding_window, 0, int64_t(1) << 24);
  in_range("--dim", o.dim, 1, 1 << 16);
  in_range("--layers", o.n_layers, 1, 1024);
  in_range("--heads", o.n_heads, 1, 1024);
  in_range("--kv-heads", o.n_kv_heads, 0, o.n_heads);
  in_range("--head-dim", o.head_dim, 0, 1 << 12);
  in_range("--ffn", o.ffn_dim, 1, 1 << 18);
  in_range("--ctx", o.context_length, 1, int64_t(1) << 24);
  in_range("--threads", o.threads, 0, 1024);
  int64_t kv = o.n_kv_heads ? o.n_kv_heads : o.n_heads;
  if (o.n_heads % kv != 0) fail("--heads ", o.n_heads, " is not a multiple of --kv-heads ", kv);
  if (o.head_dim == 0 && o.dim % o.n_heads != 0)
    fail("--dim ", o.dim, " is not a multiple of --heads ", o.n_heads, " (give --head-dim)");
  int64_t hd = o.head_dim ? o.head_dim : o.dim / o.n_heads;
  if (hd % 2 != 0) fail("head dimension ", hd, " must be even (rotary pairs)");
  if (!can_quantize(o.type)) fail("cannot write weights of type ", type_name(o.type));
  if (o.vocab_from.empty()) fail("--vocab-from FILE.gguf is required (the tokenizer to copy)");
  if (!(o.rope_base >= 0) || !std::isfinite(o.rope_base)) fail("bad rope base ", o.rope_base);
}

// Refuses a file too large for any purpose or for the disk, before writing a byte of it: a shape mistyped by a few
// digits would otherwise write for hours and then fill the disk.
void check_room_for(const std::string& out_path, uint64_t file_bytes) {
  if (file_bytes > kMaxSynthFileBytes)
    fail("the model would be ", format_bytes(double(file_bytes)), ", more than the ",
         format_bytes(double(kMaxSynthFileBytes)), " synth writes at most (check the shape)");
  std::error_code error;
  std::filesystem::path dir = std::filesystem::absolute(out_path, error).parent_path();
  const std::filesystem::space_info space = std::filesystem::space(dir, error);
  if (error) return;  // no such directory: creating the file reports it
  if (file_bytes > space.available)
    fail("the model would be ", format_bytes(double(file_bytes)), " and ", dir.string(), " has ",
         format_bytes(double(space.available)), " free");
}

}  // namespace

void parse_synth_type(const std::string& name, SynthOptions& o) {
  std::string lower;
  for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "q4_k_m") {
    o.type = GgmlType::Q4_K;
    o.q4_k_m_mix = true;
    return;
  }
  if (lower == "q4_k_s") lower = "q4_k";
  auto t = type_from_name(lower);
  if (!t || !can_quantize(*t)) fail("unknown or unsupported --type '", name, "' (e.g. f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, q4_k_m, iq4_nl, iq4_xs, mxfp4)");
  o.type = *t;
  o.q4_k_m_mix = false;
}

SynthSummary synthesize_model(const std::string& out_path, const SynthOptions& o) {
  validate(o);
  SynthSummary summary;
  const int64_t kv_heads = o.n_kv_heads ? o.n_kv_heads : o.n_heads;
  const int64_t head_dim = o.head_dim ? o.head_dim : o.dim / o.n_heads;
  const bool is_qwen = o.arch == "qwen2" || o.arch == "qwen3" || o.arch == "qwen3moe" || o.arch == "gemma3";
  const bool moe = o.arch == "qwen3moe" || o.arch == "gpt-oss";
  const float rope_base = o.rope_base > 0 ? o.rope_base : o.arch == "gpt-oss" ? 150000.f : (is_qwen ? 1e6f : 10000.f);
  const int64_t expert_ffn = o.expert_ffn_dim > 0 ? o.expert_ffn_dim : o.ffn_dim;
  const int64_t window = o.sliding_window > 0 ? o.sliding_window : o.arch == "gemma3" ? 512 : 128;

  GgufFile vocab = GgufFile::open(o.vocab_from);
  const int64_t n_vocab = static_cast<int64_t>(vocab.get_string_array("tokenizer.ggml.tokens").size());
  if (n_vocab == 0) fail(o.vocab_from, ": no tokenizer.ggml.tokens to copy");
  summary.vocab_size = n_vocab;

  // ---- metadata: what llama.cpp's loader reads for these architectures ----
  GgufWriter w;
  const std::string a = o.arch + ".";
  w.add_string("general.architecture", o.arch);
  w.add_string("general.name", o.name.empty() ? "synth-" + o.arch + "-d" + std::to_string(o.dim) : o.name);
  w.add_uint32("general.file_type", llama_file_type(o.type, o.q4_k_m_mix));
  w.add_uint32("general.quantization_version", 2);
  w.add_uint32(a + "context_length", uint32_t(o.context_length));
  w.add_uint32(a + "embedding_length", uint32_t(o.dim));
  w.add_uint32(a + "block_count", uint32_t(o.n_layers));
  w.add_uint32(a + "feed_forward_length", uint32_t(o.ffn_dim));
  w.add_uint32(a + "attention.head_count", uint32_t(o.n_heads));
  w.add_uint32(a + "attention.head_count_kv", uint32_t(kv_heads));
  w.add_uint32(a + "attention.key_length", uint32_t(head_dim));
  w.add_uint32(a + "attention.value_length", uint32_t(head_dim));
  w.add_float32(a + "rope.freq_base", rope_base);
  w.add_uint32(a + "rope.dimension_count", uint32_t(head_dim));
  w.add_float32(a + "attention.layer_norm_rms_epsilon", is_qwen ? 1e-6f : 1e-5f);
  w.add_uint32(a + "vocab_size", uint32_t(n_vocab));
  if (moe) {
    w.add_uint32(a + "expert_count", uint32_t(o.n_experts));
    w.add_uint32(a + "expert_used_count", uint32_t(o.n_experts_used));
    w.add_uint32(a + "expert_feed_forward_length", uint32_t(expert_ffn));
  }
  if (o.arch == "gemma3" || o.arch == "gpt-oss") w.add_uint32(a + "attention.sliding_window", uint32_t(window));
  if (o.arch == "gemma3") w.add_float32(a + "rope.freq_base_swa", 10000.f);
  if (o.arch == "phi3") w.add_uint32(a + "rope.scaling.original_context_length", uint32_t(o.context_length));
  if (o.arch == "gpt-oss") {  // YaRN as the published files carry it
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_float32(a + "rope.scaling.factor", 32.f);
    w.add_uint32(a + "rope.scaling.original_context_length", 4096);
  }
  for (const auto& kv : vocab.metadata())
    if (kv.key.substr(0, 10) == "tokenizer.") w.copy_kv(kv);

  // ---- tensor plan, in llama.cpp's order ----
  std::vector<PlannedTensor> plan;
  auto matrix_type = [&](GgmlType want, uint64_t row_len) {
    if (row_len % traits(want).block_elems == 0) return want;
    ++summary.n_fallback_tensors;  // llama.cpp also falls back when a row does not split into blocks
    if (want == GgmlType::IQ4_XS && row_len % 32 == 0) return GgmlType::IQ4_NL;  // llama.cpp's IQ4_XS fallback
    return row_len % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
  };
  const uint64_t dim = o.dim, ffn = o.ffn_dim, vocab_rows = n_vocab;
  const uint64_t q_w = o.n_heads * head_dim, kv_w = kv_heads * head_dim;
  auto add_matrix = [&](std::string name, uint64_t in, uint64_t out, GgmlType t) {
    plan.push_back({std::move(name), {in, out}, matrix_type(t, in), Init::Matrix});
  };
  auto add_experts = [&](std::string name, uint64_t in, uint64_t out, GgmlType t) {
    plan.push_back({std::move(name), {in, out, uint64_t(o.n_experts)}, matrix_type(t, in), Init::Matrix});
  };
  auto add_vector = [&](std::string name, uint64_t n, Init init) {
    plan.push_back({std::move(name), {n}, GgmlType::F32, init});
  };
  const GgmlType expert_type = o.type;
  const GgmlType base = o.type == GgmlType::MXFP4 ? GgmlType::Q8_0 : o.type;
  const GgmlType more = o.q4_k_m_mix ? GgmlType::Q6_K : base;
  add_matrix("token_embd.weight", dim, vocab_rows, base);
  add_vector("output_norm.weight", dim, Init::Norm);
  if (!o.tied_embeddings) add_matrix("output.weight", dim, vocab_rows, more);
  const uint64_t E = uint64_t(o.n_experts), effn = uint64_t(expert_ffn);
  for (int64_t l = 0; l < o.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const GgmlType extra = use_more_bits(l, o.n_layers) ? more : base;
    add_vector(p + "attn_norm.weight", dim, Init::Norm);
    if (o.arch == "phi3") {
      add_matrix(p + "attn_qkv.weight", dim, q_w + 2 * kv_w, base);
    } else {
      add_matrix(p + "attn_q.weight", dim, q_w, base);
      add_matrix(p + "attn_k.weight", dim, kv_w, base);
      add_matrix(p + "attn_v.weight", dim, kv_w, extra);
    }
    add_matrix(p + "attn_output.weight", q_w, dim, base);
    if (o.arch == "qwen2" || o.arch == "gpt-oss") {
      add_vector(p + "attn_q.bias", q_w, Init::Bias);
      add_vector(p + "attn_k.bias", kv_w, Init::Bias);
      add_vector(p + "attn_v.bias", kv_w, Init::Bias);
    }
    if (o.arch == "gpt-oss") {
      add_vector(p + "attn_output.bias", dim, Init::Bias);
      add_vector(p + "attn_sinks.weight", uint64_t(o.n_heads), Init::Bias);
    }
    if (o.arch == "qwen3" || o.arch == "qwen3moe" || o.arch == "gemma3") {
      add_vector(p + "attn_q_norm.weight", head_dim, Init::Norm);
      add_vector(p + "attn_k_norm.weight", head_dim, Init::Norm);
    }
    if (o.arch == "gemma3") add_vector(p + "post_attention_norm.weight", dim, Init::Norm);
    add_vector(p + (o.arch == "gpt-oss" ? "post_attention_norm.weight" : "ffn_norm.weight"), dim, Init::Norm);
    if (moe) {
      plan.push_back({p + "ffn_gate_inp.weight", {dim, E}, GgmlType::F32, Init::Matrix});
      add_experts(p + "ffn_gate_exps.weight", dim, effn, expert_type);
      add_experts(p + "ffn_up_exps.weight", dim, effn, expert_type);
      add_experts(p + "ffn_down_exps.weight", effn, dim, expert_type);
      if (o.arch == "gpt-oss") {
        add_vector(p + "ffn_gate_inp.bias", E, Init::Bias);
        for (const char* b : {"ffn_gate_exps.bias", "ffn_up_exps.bias"})
          plan.push_back({p + b, {effn, E}, GgmlType::F32, Init::Bias});
        plan.push_back({p + "ffn_down_exps.bias", {dim, E}, GgmlType::F32, Init::Bias});
      }
    } else if (o.arch == "phi3") {
      add_matrix(p + "ffn_up.weight", dim, 2 * ffn, base);
      add_matrix(p + "ffn_down.weight", ffn, dim, extra);
    } else {
      add_matrix(p + "ffn_gate.weight", dim, ffn, base);
      add_matrix(p + "ffn_up.weight", dim, ffn, base);
      add_matrix(p + "ffn_down.weight", ffn, dim, extra);
    }
    if (o.arch == "gemma3") add_vector(p + "post_ffw_norm.weight", dim, Init::Norm);
  }
  for (const auto& t : plan) {
    w.add_tensor(t.name, t.dims, t.type);
    uint64_t n = 1;
    for (uint64_t d : t.dims) n *= d;
    summary.n_params += n;
  }

  // ---- stream the data: per tensor, chunks of rows generated + quantized in parallel ----
  check_room_for(out_path, w.file_size());
  auto stop_if_asked = [&] {
    if (o.should_stop && o.should_stop()) fail("stopped before the end");
  };
  const int n_threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  GgufStreamWriter out(out_path, w);
  std::vector<uint8_t> chunk;
  uint64_t done = 0, total = w.data_size();
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const PlannedTensor& t = plan[ti];
    const int64_t row_len = static_cast<int64_t>(t.dims[0]);
    uint64_t rows = 1;
    for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];  // 3-D expert tensors: every expert's rows
    const uint64_t rb = row_bytes(t.type, row_len);
    const uint64_t rows_per_chunk =
        std::max<uint64_t>(1, (o.repeat_first_chunk ? k_repeated_chunk_bytes : k_chunk_bytes) / rb);
    for (uint64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
      const uint64_t nr = std::min(rows_per_chunk, rows - r0);
      if (o.repeat_first_chunk && r0 > 0) {  // the first chunk, still in `chunk`, is written again (cut at the end)
        stop_if_asked();
        out.write(chunk.data(), nr * rb);
        done += nr * rb;
        if (o.progress) o.progress(done, total);
        continue;
      }
      chunk.resize(nr * rb);
      std::exception_ptr worker_error;
      std::mutex error_mutex;
      auto work = [&](uint64_t first, uint64_t last) {
        try {
          std::vector<float> row(row_len);
          for (uint64_t r = first; r < last; ++r) {
            stop_if_asked();
            fill_row(t.init, o.seed, ti, r0 + r, row.data(), row_len);
            quantize_row(t.type, row.data(), chunk.data() + r * rb, row_len);
          }
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!worker_error) worker_error = std::current_exception();
        }
      };
      const uint64_t n_workers = std::min<uint64_t>(n_threads, nr);
      if (n_workers <= 1) {
        work(0, nr);
      } else {
        std::vector<std::jthread> pool;
        for (uint64_t k = 0; k < n_workers; ++k) pool.emplace_back(work, nr * k / n_workers, nr * (k + 1) / n_workers);
      }
      if (worker_error) std::rethrow_exception(worker_error);
      out.write(chunk.data(), chunk.size());
      done += chunk.size();
      if (o.progress) o.progress(done, total);
    }
  }
  out.finish();
  summary.file_bytes = w.file_size();
  return summary;
}

}  // namespace greta::model
