// The llama.cpp reference outputs in ../shared/golden (see ../shared/README.md): NAME.pK.json plus the prompt logits,
// read by a minimal JSON reader that handles exactly what those files use (objects, arrays, numbers, strings, bools).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
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

inline GoldenCase load_golden(const std::string& json_path) {
  const JsonValue j = JsonReader(read_text(json_path)).parse();
  GoldenCase g;
  g.name = std::filesystem::path(json_path).stem().string();
  g.model_path = shared_path("models/" + j.at("model").str);
  g.prompt = j.at("prompt").str;
  g.add_bos = j.at("add_bos").b;
  g.n_vocab = int64_t(j.at("n_vocab").num);
  for (const auto& v : j.at("prompt_tokens").items) g.prompt_tokens.push_back(int32_t(v.num));
  for (const auto& v : j.at("greedy_tokens").items) g.greedy_tokens.push_back(int32_t(v.num));
  for (const auto& v : j.at("greedy_margins").items) g.greedy_margins.push_back(v.num);
  const std::string logits = read_text(shared_path("golden/" + j.at("prompt_logits_file").str));
  if (logits.size() != g.prompt_tokens.size() * size_t(g.n_vocab) * 4)
    throw std::runtime_error(json_path + ": prompt logits file has the wrong size");
  g.prompt_logits.resize(logits.size() / 4);
  std::memcpy(g.prompt_logits.data(), logits.data(), logits.size());  // little-endian float32, as is the host
  return g;
}

// Every golden case, sorted by name.
inline std::vector<std::string> golden_json_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(shared_path("golden")))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The golden cases grouped by model file (each model's two prompts), for the batched runs.
inline std::map<std::string, std::vector<GoldenCase>> golden_cases_by_model() {
  std::map<std::string, std::vector<GoldenCase>> by_model;
  for (const std::string& file : golden_json_files()) {
    GoldenCase g = load_golden(file);
    by_model[g.model_path].push_back(std::move(g));
  }
  return by_model;
}

}  // namespace greta::test
