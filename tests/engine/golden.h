// The llama.cpp reference outputs in ../shared/golden (see ../shared/README.md): NAME.pK.json plus the prompt logits,
// read by a minimal JSON reader that handles exactly what those files use (objects, arrays, numbers, strings, bools).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "test_util.h"

namespace greta::test {

struct JsonValue {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> fields;

  const JsonValue& at(const std::string& key) const {
    auto it = fields.find(key);
    if (it == fields.end()) throw std::runtime_error("json: no field " + key);
    return it->second;
  }
  bool has(const std::string& key) const { return fields.count(key) != 0; }
};

class JsonReader {
public:
  explicit JsonReader(std::string text) : s_(std::move(text)) {}
  JsonValue parse() {
    JsonValue v = value();
    skip_ws();
    if (i_ != s_.size()) error("trailing characters");
    return v;
  }

private:
  [[noreturn]] void error(const char* what) { throw std::runtime_error("json: " + std::string(what) + " at " + std::to_string(i_)); }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() {
    skip_ws();
    if (i_ >= s_.size()) error("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) error("unexpected character");
    ++i_;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000) out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    else out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
  }
  uint32_t hex4() {
    if (i_ + 4 > s_.size()) error("short \\u escape");
    const uint32_t v = uint32_t(std::stoul(s_.substr(i_, 4), nullptr, 16));
    i_ += 4;
    return v;
  }
  std::string string_body() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) error("bad escape");
      c = s_[i_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i_ + 6 <= s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
            i_ += 2;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4() - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: out += c;
      }
    }
    if (i_ >= s_.size()) error("unterminated string");
    ++i_;
    return out;
  }
  JsonValue value() {
    JsonValue v;
    const char c = peek();
    if (c == '{') {
      v.kind = JsonValue::Object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        std::string key = string_body();
        expect(':');
        v.fields[key] = value();
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JsonValue::String;
      v.str = string_body();
      return v;
    }
    if (s_.compare(i_, 4, "true") == 0) return i_ += 4, v.kind = JsonValue::Bool, v.b = true, v;
    if (s_.compare(i_, 5, "false") == 0) return i_ += 5, v.kind = JsonValue::Bool, v;
    if (s_.compare(i_, 4, "null") == 0) return i_ += 4, v;
    size_t used = 0;
    v.kind = JsonValue::Number;
    v.num = std::stod(s_.substr(i_, 40), &used);
    if (used == 0) error("bad number");
    i_ += used;
    return v;
  }

  std::string s_;
  size_t i_ = 0;
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// One golden case: NAME.pK.json and its prompt logits.
struct GoldenCase {
  std::string name;       // "stories260K.p1"
  std::string model_path; // ../shared/models/MODEL
  std::string prompt;
  bool add_bos = true;
  int64_t n_vocab = 0;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> greedy_tokens;
  std::vector<double> greedy_margins;
  std::vector<float> prompt_logits;  // [prompt_tokens.size(), n_vocab]
};

// Greedy steps compared per golden case: all of them in a Release run; the first 8 under AddressSanitizer or the
// Khronos validation layer (GRETA_VK_VALIDATION=1, CTest's validation entries). Those runs check memory and API use,
// which every decode step exercises alike (the steps differ in position only), and the Release run of the same suite
// on the same device compares every step; CI runs the Vulkan goldens three times on lavapipe, their decode steps most
// of that time.
inline size_t golden_greedy_steps() {
#if defined(__SANITIZE_ADDRESS__)
  return 8;
#else
  const char* validation = std::getenv("GRETA_VK_VALIDATION");
  return validation && std::string_view(validation) == "1" ? 8 : SIZE_MAX;
#endif
}

inline GoldenCase load_golden(const std::string& json_path) {
  const JsonValue j = JsonReader(read_text(json_path)).parse();
  GoldenCase g;
  g.name = std::filesystem::path(json_path).stem().string();
  // A golden in next/golden names a model in next/models (../shared/README.md): models/ beside the golden folder.
  const std::filesystem::path shared_dir = std::filesystem::path(json_path).parent_path().parent_path();
  g.model_path = (shared_dir / "models" / j.at("model").str).string();
  g.prompt = j.at("prompt").str;
  g.add_bos = j.at("add_bos").b;
  g.n_vocab = int64_t(j.at("n_vocab").num);
  for (const auto& v : j.at("prompt_tokens").items) g.prompt_tokens.push_back(int32_t(v.num));
  for (const auto& v : j.at("greedy_tokens").items) g.greedy_tokens.push_back(int32_t(v.num));
  for (const auto& v : j.at("greedy_margins").items) g.greedy_margins.push_back(v.num);
  if (g.greedy_margins.size() != g.greedy_tokens.size())
    throw std::runtime_error(json_path + ": greedy_tokens and greedy_margins differ in length");
  const size_t steps = std::min(g.greedy_tokens.size(), golden_greedy_steps());
  g.greedy_tokens.resize(steps);
  g.greedy_margins.resize(steps);
  const std::string logits =
      read_text((std::filesystem::path(json_path).parent_path() / j.at("prompt_logits_file").str).string());
  if (logits.size() != g.prompt_tokens.size() * size_t(g.n_vocab) * 4)
    throw std::runtime_error(json_path + ": prompt logits file has the wrong size");
  g.prompt_logits.resize(logits.size() / 4);
  std::memcpy(g.prompt_logits.data(), logits.data(), logits.size());  // little-endian float32, as is the host
  return g;
}

// The models of ../shared/next (features added after the first goldens) and the backends that run them: their
// goldens join the others on those backends. At the end of that work every next/ model runs everywhere.
inline bool next_model_supported(const std::string& model_file, std::string_view backend) {
  struct NextModel {
    const char* file;
    const char* backends;  // "cpu vk hip"
  };
  static const NextModel kNext[] = {
      {"synth-qwen3moe-d128-q8_0.gguf", "cpu vk hip"},
      {"synth-gemma3-d128-q8_0.gguf", "cpu vk hip"},
      {"synth-phi3-d256-q4_k_m.gguf", "cpu vk hip"},
      {"synth-gptoss-d128-q8_0.gguf", "cpu vk hip"},
      {"synth-llama-d256-iq4_nl.gguf", "cpu vk hip"},
      {"synth-llama-d256-iq4_xs.gguf", "cpu vk hip"},
      {"synth-gptoss-d128-mxfp4.gguf", "cpu vk hip"},
  };
  if (std::getenv("GRETA_GOLDEN_NEXT")) return true;  // all of next/, for work on a new model (CI does not set it)
  for (const NextModel& m : kNext)
    if (model_file == m.file) return std::string_view(m.backends).find(backend) != std::string_view::npos;
  return false;
}

// Whether GRETA_GOLDEN_ONLY narrows the goldens (the tests' count checks then ask for at least one).
inline bool golden_filtered() { return std::getenv("GRETA_GOLDEN_ONLY") != nullptr; }
inline size_t golden_min(size_t all) { return golden_filtered() ? 1 : all; }

// Every golden case (golden/ and the ones of next/golden that `backend` runs: "cpu", "vk", "hip"), sorted by name. GRETA_GOLDEN_ONLY=SUBSTRING
// keeps only the cases whose file name contains it (for working on one model; CI does not set it).
inline std::vector<std::string> golden_json_files(std::string_view backend) {
  std::vector<std::string> files;
  const char* only = std::getenv("GRETA_GOLDEN_ONLY");
  auto keep = [&](const std::filesystem::path& p) {
    return p.extension() == ".json" && (!only || p.filename().string().find(only) != std::string::npos);
  };
  for (const auto& e : std::filesystem::directory_iterator(shared_path("golden")))
    if (keep(e.path())) files.push_back(e.path().string());
  for (const auto& e : std::filesystem::directory_iterator(shared_path("next/golden"))) {
    if (!keep(e.path())) continue;
    const JsonValue j = JsonReader(read_text(e.path().string())).parse();
    if (next_model_supported(j.at("model").str, backend)) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return std::filesystem::path(a).filename() < std::filesystem::path(b).filename();
  });
  return files;
}

// The golden cases grouped by model file (each model's two prompts), for the batched runs.
inline std::map<std::string, std::vector<GoldenCase>> golden_cases_by_model(std::string_view backend) {
  std::map<std::string, std::vector<GoldenCase>> by_model;
  for (const std::string& file : golden_json_files(backend)) {
    GoldenCase g = load_golden(file);
    by_model[g.model_path].push_back(std::move(g));
  }
  return by_model;
}

}  // namespace greta::test
