// greta-vk info MODEL: what a GGUF file holds and what running it needs. Works on any valid GGUF: for a supported
// architecture it prints the configuration and memory estimate, otherwise (or for a vocabulary-only file) the file
// and tokenizer facts and why there is nothing more.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/placement.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "vk/device_info.h"
#include "vk/instance.h"

namespace greta::cli {

namespace {

using namespace greta::model;

constexpr OptionSpec k_info_options[] = {
    {"ctx", "c", true, "context length for the KV-cache estimate (default: the model's)"},
    {"metadata", "m", false, "list every metadata key and value"},
    {"tensors", "t", false, "list every tensor (name, type, shape, bytes)"},
    {"help", "h", false, "show this help"},
};

std::string count_string(uint64_t n) {
  char buf[64];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.2f K", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%" PRIu64, n);
  return buf;
}

std::string shape_string(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// One metadata value, shortened: long strings and arrays show their first elements.
std::string value_string(const GgufValue& v) {
  auto clip = [](std::string_view s) {
    std::string out;
    for (char ch : s.substr(0, 60)) out += (ch == '\n') ? std::string("\\n") : std::string(1, ch);
    return s.size() > 60 ? out + "..." : out;
  };
  switch (v.type) {
    case GgufType::STRING: return "\"" + clip(v.str) + "\"";
    case GgufType::BOOL: return v.b ? "true" : "false";
    case GgufType::FLOAT32: case GgufType::FLOAT64: return cat(v.f);
    case GgufType::INT8: case GgufType::INT16: case GgufType::INT32: case GgufType::INT64: return cat(v.i);
    case GgufType::ARRAY: {
      std::string s = cat(gguf_type_name(v.array_type), "[", v.array_count, "]");
      if (v.array_type == GgufType::STRING) {
        s += " {";
        for (size_t i = 0; i < v.array_strings.size() && i < 4; ++i) s += (i ? ", \"" : "\"") + clip(v.array_strings[i]) + "\"";
        s += v.array_count > 4 ? ", ...}" : "}";
      }
      return s;
    }
    default: return cat(v.u);
  }
}

void print_tokenizer(const GgufFile& f) {
  auto model = f.get_string("tokenizer.ggml.model");
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!model && tokens.empty()) {
    std::printf("tokenizer:     none in this file\n");
    return;
  }
  std::string kind = model ? std::string(*model) : "unknown";
  const char* family = kind == "llama" ? " (SentencePiece)" : kind == "gpt2" ? " (byte-level BPE)" : "";
  std::printf("tokenizer:     %s%s, %zu tokens", kind.c_str(), family, tokens.size());
  if (auto pre = f.get_string("tokenizer.ggml.pre")) std::printf(", pre-tokenizer %.*s", int(pre->size()), pre->data());
  auto merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges.empty()) std::printf(", %zu merges", merges.size());
  std::printf("\n");
  auto bos = f.get_int("tokenizer.ggml.bos_token_id");
  auto eos = f.get_int("tokenizer.ggml.eos_token_id");
  auto token_name = [&](int64_t id) {
    return id >= 0 && uint64_t(id) < tokens.size() ? std::string(tokens[id]) : std::string("?");
  };
  if (bos || eos)
    std::printf("               bos %s (%s), eos %s (%s)\n", bos ? std::to_string(*bos).c_str() : "-",
                bos ? token_name(*bos).c_str() : "", eos ? std::to_string(*eos).c_str() : "-",
                eos ? token_name(*eos).c_str() : "");
  if (f.find("tokenizer.chat_template")) std::printf("               has a chat template\n");
}

// What `run` would do with the model on each usable Vulkan device: how the device's memory is used (unified or
// dedicated; weights in place, copied or staged) and where `--gpu-layers auto` puts the blocks at this context.
void print_device_fit(const GgufFile& f, const ModelConfig& c, int64_t ctx) {
  std::vector<vk::DeviceInfo> devices;
  engine::ModelWeights weights;
  try {
    devices = vk::list_devices();
    weights = engine::map_weights(f, c);
  } catch (const Error& e) {
    std::printf("devices:       none to place it on (%s)\n", e.what());
    return;
  }
  bool first = true;
  for (const vk::DeviceInfo& d : devices) {
    if (!d.usable) continue;
    std::printf("%-15s[%u] %s: memory %s\n", first ? "devices:" : "", d.index, d.name.c_str(), d.memory_summary().c_str());
    first = false;
    const engine::PlacementDevice places[] = {{cat("[", d.index, "]"), d.memory_capacity()},
                                              {"the CPU", cpu::physical_memory_bytes()}};
    engine::PlacementRequest request;
    request.cpu_offload = true;
    request.ctx = ctx;
    try {
      const engine::Placement p = engine::place_layers(c, weights, places, request);
      std::printf("%-15s--gpu-layers auto at --ctx %" PRId64 ": %s\n", "", ctx,
                  p.layers.back() == 0 ? cat("all ", c.n_layers, " blocks on it").c_str() : p.describe().c_str());
    } catch (const Error& e) {
      std::printf("%-15s--gpu-layers auto at --ctx %" PRId64 ": %s\n", "", ctx, e.what());
    }
  }
  if (first) std::printf("devices:       no usable Vulkan device\n");
}

}  // namespace

int cmd_info(int argc, char** argv) {
  Args args(argc, argv, k_info_options);
  const char* usage = "greta-vk info MODEL.gguf [--ctx N] [--metadata] [--tensors]";
  if (args.has("help")) {
    std::printf("usage: %s\n%s", usage, usage_options(k_info_options).c_str());
    return 0;
  }
  args.expect_positional(1, 1, usage);
  GgufFile f = GgufFile::open(args.positional()[0]);

  std::printf("file:          %s\n", f.path().c_str());
  std::printf("format:        GGUF v%u, %s, %zu metadata keys, %zu tensors, alignment %" PRIu64 "\n", f.version(),
              format_bytes(double(f.file_size())).c_str(), f.metadata().size(), f.tensors().size(), f.alignment());
  if (auto name = f.get_string("general.name")) std::printf("name:          %.*s\n", int(name->size()), name->data());
  auto arch = f.get_string("general.architecture");
  std::printf("architecture:  %s\n", arch ? std::string(*arch).c_str() : "(none)");

  if (args.has("metadata")) {
    std::printf("metadata:\n");
    for (const auto& kv : f.metadata())
      std::printf("  %-48.*s %-8s %s\n", int(kv.key.size()), kv.key.data(), gguf_type_name(kv.value.type),
                  value_string(kv.value).c_str());
  }

  print_tokenizer(f);

  if (f.tensors().empty()) {
    std::printf("tensors:       none (a vocabulary-only file: nothing to run)\n");
    return 0;
  }

  // tensor types: counts, parameters, bytes
  struct TypeStats { uint64_t count = 0, params = 0, bytes = 0; };
  std::map<std::string, TypeStats> by_type;
  uint64_t params = 0, weight_bytes = 0;
  for (const auto& t : f.tensors()) {
    auto& s = by_type[type_name(t.type)];
    ++s.count;
    s.params += t.n_elements;
    s.bytes += t.n_bytes;
    params += t.n_elements;
    weight_bytes += t.n_bytes;
  }
  std::printf("parameters:    %s (%" PRIu64 ")\n", count_string(params).c_str(), params);
  std::printf("tensor types:\n");
  for (const auto& [name, s] : by_type)
    std::printf("  %-6s %5" PRIu64 " tensors  %12" PRIu64 " params  %12s\n", name.c_str(), s.count, s.params,
                format_bytes(double(s.bytes)).c_str());
  if (args.has("tensors")) {
    std::printf("tensors:\n");
    for (const auto& t : f.tensors())
      std::printf("  %-32.*s %-5s %-22s %12s  at %" PRIu64 "\n", int(t.name.size()), t.name.data(), type_name(t.type),
                  shape_string(t.dims).c_str(), format_bytes(double(t.n_bytes)).c_str(), f.data_offset() + t.offset);
  }

  ModelConfig c;
  try {
    c = ModelConfig::from_gguf(f);
  } catch (const Error& e) {
    std::printf("model:         not runnable by GRETA: %s\n", e.what());
    std::printf("memory:        weights %s\n", format_bytes(double(weight_bytes)).c_str());
    return 0;
  }
  std::printf("shape:         dim %" PRId64 ", %" PRId64 " layer%s, %" PRId64 " heads / %" PRId64
              " KV heads, head dim %" PRId64 ", ffn %" PRId64 ", vocab %" PRId64 ", context %" PRId64 "\n",
              c.dim, c.n_layers, c.n_layers == 1 ? "" : "s", c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.vocab_size, c.context_length);
  std::printf("rope:          %s pairs, base %g, %" PRId64 " dims%s", c.rope_pairing == RopePairing::Adjacent ? "adjacent" : "NEOX half",
              double(c.rope_base), c.rope_dims, c.rope_freq_factors ? ", per-frequency factors" : "");
  if (c.rope_scale != 1.f) std::printf(", linear scale %g", double(c.rope_scale));
  std::printf("; RMSNorm eps %g\n", double(c.rms_eps));
  std::string features;
  if (c.tied_embeddings) features += " tied-embeddings";
  if (c.qkv_bias) features += " qkv-bias";
  if (c.qk_norm) features += " qk-norm";
  if (c.n_kv_heads < c.n_heads) features += c.n_kv_heads == 1 ? " multi-query" : " grouped-query";
  if (c.n_experts > 0)
    features += cat(" experts(", c.n_experts, ", ", c.n_experts_used, " per token, ffn ", c.expert_ffn_dim, ")");
  if (c.sliding_window > 0) {
    int64_t swa = 0;
    for (int64_t l = 0; l < c.n_layers; ++l) swa += c.layer_is_swa(l);
    features += cat(" sliding-window(", c.sliding_window, " on ", swa, "/", c.n_layers, " layers)");
  }
  if (c.rope_yarn) features += cat(" yarn(x", 1.f / c.rope_scale, " from ", c.rope_ctx_orig, ")");
  if (c.embed_scale != 1.f) features += " scaled-embeddings";
  std::printf("features:     %s\n", features.empty() ? " none" : features.c_str());

  const int64_t ctx = args.get_int("ctx", c.context_length);
  if (ctx < 1 || ctx > (int64_t(1) << 32)) fail("--ctx ", ctx, " is out of range");
  // K and V per token and layer: n_kv_heads * head_dim (K) + n_kv_heads * head_dim_v (V) elements
  const double kv_elems = double(c.n_layers) * double(ctx) * double(c.n_kv_heads) * double(c.head_dim + c.head_dim_v);
  std::printf("memory:        weights %s; KV cache at %" PRId64 " tokens: %s (f32) / %s (f16)\n",
              format_bytes(double(weight_bytes)).c_str(), ctx, format_bytes(kv_elems * 4).c_str(),
              format_bytes(kv_elems * 2).c_str());
  std::printf("               total %s (f32 KV) / %s (f16 KV), plus activations\n",
              format_bytes(double(weight_bytes) + kv_elems * 4).c_str(),
              format_bytes(double(weight_bytes) + kv_elems * 2).c_str());
  print_device_fit(f, c, args.has("ctx") ? ctx : engine::Engine::default_context(c));  // `run`'s context
  return 0;
}

}  // namespace greta::cli
