// A tiny but complete GGUF model (llama-family tensors), built in memory for tests that break one rule at a time:
// model config tests (metadata) and architecture tests (tensors).
#pragma once
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model_config.h"

namespace greta::test {

using model::GgmlType;
using model::GgufWriter;

// A tiny but complete model description; `edit` may change anything before the file is built.
struct TinyModel {
  std::string arch = "llama";
  uint64_t dim = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16, ffn = 96, vocab = 40;
  bool biases = false, qk_norm = false, tied = false;
  GgmlType weight_type = GgmlType::F32;
  std::function<void(GgufWriter&)> extra_meta;
  std::set<std::string> skip_tensors;
  std::map<std::string, std::vector<uint64_t>> shape_override;
  std::map<std::string, GgmlType> type_override;
  std::set<std::string> skip_keys;

  std::vector<uint8_t> build() const {
    GgufWriter w;
    auto key = [&](const std::string& k) { return !skip_keys.count(k); };
    if (key("general.architecture")) w.add_string("general.architecture", arch);
    auto a = [&](const char* s) { return arch + "." + s; };
    if (key("embedding_length")) w.add_uint32(a("embedding_length"), uint32_t(dim));
    if (key("block_count")) w.add_uint32(a("block_count"), uint32_t(layers));
    if (key("head_count")) w.add_uint32(a("attention.head_count"), uint32_t(heads));
    w.add_uint32(a("attention.head_count_kv"), uint32_t(kv_heads));
    w.add_uint32(a("attention.key_length"), uint32_t(head_dim));
    w.add_uint32(a("feed_forward_length"), uint32_t(ffn));
    w.add_uint32(a("context_length"), 256);
    w.add_float32(a("attention.layer_norm_rms_epsilon"), 1e-6f);
    w.add_float32(a("rope.freq_base"), 50000.f);
    if (extra_meta) extra_meta(w);
    auto add = [&](const std::string& name, std::vector<uint64_t> dims, GgmlType type) {
      if (skip_tensors.count(name)) return;
      if (auto it = shape_override.find(name); it != shape_override.end()) dims = it->second;
      if (auto it = type_override.find(name); it != type_override.end()) type = it->second;
      w.add_tensor(name, dims, type);
    };
    add("token_embd.weight", {dim, vocab}, weight_type);
    add("output_norm.weight", {dim}, GgmlType::F32);
    if (!tied) add("output.weight", {dim, vocab}, weight_type);
    for (uint64_t l = 0; l < layers; ++l) {
      std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {dim}, GgmlType::F32);
      add(p + "attn_q.weight", {dim, heads * head_dim}, weight_type);
      add(p + "attn_k.weight", {dim, kv_heads * head_dim}, weight_type);
      add(p + "attn_v.weight", {dim, kv_heads * head_dim}, weight_type);
      add(p + "attn_output.weight", {heads * head_dim, dim}, weight_type);
      if (biases) {
        add(p + "attn_q.bias", {heads * head_dim}, GgmlType::F32);
        add(p + "attn_k.bias", {kv_heads * head_dim}, GgmlType::F32);
        add(p + "attn_v.bias", {kv_heads * head_dim}, GgmlType::F32);
      }
      if (qk_norm) {
        add(p + "attn_q_norm.weight", {head_dim}, GgmlType::F32);
        add(p + "attn_k_norm.weight", {head_dim}, GgmlType::F32);
      }
      add(p + "ffn_norm.weight", {dim}, GgmlType::F32);
      add(p + "ffn_gate.weight", {dim, ffn}, weight_type);
      add(p + "ffn_up.weight", {dim, ffn}, weight_type);
      add(p + "ffn_down.weight", {ffn, dim}, weight_type);
    }
    std::vector<std::vector<uint8_t>> data;
    std::mt19937 rng(5);
    for (size_t i = 0; i < w.tensor_count(); ++i) {
      data.emplace_back(w.tensor_bytes(i));
      for (auto& b : data.back()) b = uint8_t(rng());
    }
    return w.to_bytes(data);
  }
  model::GgufFile file() const { return model::GgufFile::from_memory(build(), "tiny.gguf"); }
  model::ModelConfig config() const { return model::ModelConfig::from_gguf(file()); }
};

}  // namespace greta::test
