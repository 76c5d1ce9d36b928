// Tokenizers against llama.cpp: its test vectors for five vocabularies (../shared/vocab), the prompt tokens of every
// golden reference (../shared/golden), synthetic vocabularies exercising merge
// order and byte fallback, special-token parsing, decode round trips and hostile input (random and invalid UTF-8).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/tokenizer_internal.h"
#include "test_util.h"

using namespace greta;
using namespace greta::model;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ids_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// A vocabulary test file set: DIR/ggml-vocab-NAME.gguf[.xz] with its .inp and .out.
struct VocabFiles {
  std::string name;
  std::string gguf;  // the vocabulary (xz-compressed or plain)
  std::string base;  // DIR/ggml-vocab-NAME.gguf, to which .inp / .out are appended
};

std::optional<VocabFiles> find_vocab(const std::string& dir, const std::string& name) {
  const std::string base = dir + "/ggml-vocab-" + name + ".gguf";
  if (!std::filesystem::exists(base + ".inp") || !std::filesystem::exists(base + ".out")) return std::nullopt;
  for (const std::string& gguf : {base + ".xz", base})
    if (std::filesystem::exists(gguf)) return VocabFiles{name, gguf, base};
  return std::nullopt;
}

VocabFiles vocab_files(const std::string& rel_dir, const std::string& name) {
  const auto files = find_vocab(test::shared_path(rel_dir), name);
  REQUIRE_MESSAGE(files.has_value(), "no vocabulary ", name, " in ", rel_dir);
  return *files;
}

// Every vocabulary with test vectors in `dir` (sorted by name).
std::vector<VocabFiles> vocabs_in(const std::string& dir) {
  std::vector<VocabFiles> found;
  if (!std::filesystem::is_directory(dir)) return found;
  const std::string prefix = "ggml-vocab-", suffix = ".gguf.inp";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.size() <= prefix.size() + suffix.size() || f.compare(0, prefix.size(), prefix) != 0 ||
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    if (auto v = find_vocab(dir, f.substr(prefix.size(), f.size() - prefix.size() - suffix.size())))
      found.push_back(*v);
  }
  std::sort(found.begin(), found.end(), [](const VocabFiles& a, const VocabFiles& b) { return a.name < b.name; });
  return found;
}

// One tokenizer per vocabulary file, loaded once for the whole run (the BPE ones take a moment).
const Tokenizer& load_vocab(const VocabFiles& files) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(files.gguf);
  if (it == cache.end()) it = cache.emplace(files.gguf, Tokenizer::from_gguf(GgufFile::open(files.gguf))).first;
  return it->second;
}
const Tokenizer& shared_vocab(const std::string& name) { return load_vocab(vocab_files("vocab", name)); }
// The same from vocab/ or next/vocab/.
const Tokenizer& any_vocab(const std::string& name) {
  const bool in_vocab = find_vocab(test::shared_path("vocab"), name).has_value();
  return load_vocab(vocab_files(in_vocab ? "vocab" : "next/vocab", name));
}

// llama.cpp's test-tokenizer-0 format: .inp holds strings separated by "\n__ggml_vocab_test__\n" (text after the last
// separator is one more string), line k of .out the ids of string k.
struct VocabVectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<TokenId>> expected;
};

VocabVectors vocab_vectors(const VocabFiles& files) {
  const std::string inp = read_text(files.base + ".inp"), out = read_text(files.base + ".out");
  VocabVectors v;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t hit = inp.find(sep, pos);
    v.inputs.push_back(inp.substr(pos, hit == std::string::npos ? std::string::npos : hit - pos));
    pos = hit == std::string::npos ? inp.size() : hit + sep.size();
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<TokenId>& e = v.expected.emplace_back();
    for (TokenId id; ids >> id;) e.push_back(id);
  }
  REQUIRE(v.inputs.size() == v.expected.size());
  REQUIRE(v.inputs.size() > 40);
  return v;
}

bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }

// Strings whose decode llama.cpp changes on purpose: SPM and SPM-style BPE (gemma4) decode "▁" as a space; BPE
// vocabularies with clean_up_tokenization_spaces drop spaces before punctuation and some apostrophes.
bool round_trips(const Tokenizer& tok, std::string_view s) {
  if (tok.kind() == "bert") return false;  // normalized words come back, each after a space
  if (tok.kind() == "llama") return !contains(s, "\xe2\x96\x81");
  const tok::PreTokenizerConfig cfg = tok::pre_tokenizer_config(tok.pre_tokenizer());
  if (cfg.escape_spaces && contains(s, "\xe2\x96\x81")) return false;
  if (!cfg.clean_spaces) return true;
  for (auto p : {" ?", " !", " .", " ,", " '"})
    if (contains(s, p)) return false;
  return true;
}

// SPM and SPM-style BPE (gemma4) decode "▁" as a space.
bool escapes_spaces(const Tokenizer& tok) {
  return tok.kind() == "llama" || tok::pre_tokenizer_config(tok.pre_tokenizer()).escape_spaces;
}

std::string spaces_unescaped(std::string s) {
  for (size_t pos; (pos = s.find("\xe2\x96\x81")) != std::string::npos;) s.replace(pos, 3, " ");
  return s;
}

bool valid_utf8(std::string_view s) {
  std::string reencoded;
  for (uint32_t cpt : tok::decode_utf8_lenient(s)) tok::append_utf8(reencoded, cpt);
  return reencoded == s && !contains(s, "\xef\xbf\xbd");  // strict enough for the fixtures (no overlong forms)
}

void check_vocab(const VocabFiles& files) {
  const Tokenizer& tok = load_vocab(files);
  const VocabVectors v = vocab_vectors(files);
  size_t round_tripped = 0;
  for (size_t k = 0; k < v.inputs.size(); ++k) {
    const std::string& s = v.inputs[k];
    CAPTURE(k);
    CAPTURE(s);
    const std::vector<TokenId> ids = tok.encode(s, /*add_special=*/false, /*parse_special=*/false);
    CHECK_MESSAGE(ids == v.expected[k], "got      ", ids_string(ids), "\nexpected ", ids_string(v.expected[k]));
    if (tok.kind() == "bert") {
      // llama.cpp decodes WordPiece ids to the normalized words, each after a space (then cleans up spaces before
      // punctuation); that text tokenizes to the same ids again unless an [UNK] (which decodes to nothing) is in them.
      if (std::none_of(ids.begin(), ids.end(), [&](TokenId id) { return tok.is_control(id); })) {
        CHECK(tok.encode(tok.decode(ids), false) == ids);
        ++round_tripped;
      }
    } else if (valid_utf8(s) && round_trips(tok, s)) {
      CHECK(tok.decode(ids) == s);
      ++round_tripped;
    }
  }
  MESSAGE(files.name, ": ", v.inputs.size(), " vectors, ", round_tripped, " decode round trips");
  CHECK(round_tripped >= v.inputs.size() * 2 / 3);
}
void check_vocab(const std::string& name) { check_vocab(vocab_files("vocab", name)); }

// A random UTF-8 string from a pool of scripts, spaces and punctuation (never only ASCII letters).
std::string random_text(std::mt19937& rng, bool allow_cleanup_chars) {
  static const std::vector<uint32_t> pool = {
      'a',    'Z',    'q',    '0',    '7',    ' ',    ' ',    '\n',   '\t',   '\r',   '-',     '(',    '"',
      '?',    '.',    ',',    '!',    '\'',   0xE9,   0xDF,   0x430,  0x44F,  0x3B1,  0x5D0,   0x627,  0x915,
      0x301,  0x4E2D, 0x6587, 0x3042, 0xAC00, 0xA0,   0x85,   0x3000, 0x2003, 0x180E, 0x200B,  0xFFFD, 0x1F600,
      0x1F680, 0x2581, 0x10348, 0xFF10, 0x2460, 0xB2, 0x16A0, 0x1E00};
  std::uniform_int_distribution<size_t> len(1, 40), pick(0, pool.size() - 1);
  std::string s;
  for (size_t i = 0, n = len(rng); i < n; ++i) {
    uint32_t c = pool[pick(rng)];
    if (!allow_cleanup_chars && (c == '?' || c == '.' || c == ',' || c == '!' || c == '\'')) c = 'x';
    tok::append_utf8(s, c);
  }
  return s;
}

std::string utf8(std::initializer_list<uint32_t> cpts) {
  std::string s;
  for (uint32_t c : cpts) tok::append_utf8(s, c);
  return s;
}

// ---- a tiny JSON reader for the golden files -------------------------------------------------------------------------
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  const Json& operator[](const std::string& key) const {
    auto it = fields.find(key);
    REQUIRE_MESSAGE(it != fields.end(), "missing JSON key ", key);
    return it->second;
  }
};

class JsonParser {
public:
  explicit JsonParser(std::string_view text) : s_(text) {}
  Json parse() {
    Json v = value();
    skip_ws();
    REQUIRE(pos_ == s_.size());
    return v;
  }

private:
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char next() {
    REQUIRE(pos_ < s_.size());
    return s_[pos_++];
  }
  void expect(std::string_view word) {
    REQUIRE(s_.substr(pos_, word.size()) == word);
    pos_ += word.size();
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = next();
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }
  std::string string_body() {
    std::string out;
    for (char c; (c = next()) != '"';) {
      if (c != '\\') {
        out += c;
        continue;
      }
      switch (const char e = next()) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t cpt = hex4();
          if (cpt >= 0xD800 && cpt < 0xDC00) {  // surrogate pair
            expect("\\u");
            cpt = 0x10000 + ((cpt - 0xD800) << 10) + (hex4() - 0xDC00);
          }
          tok::append_utf8(out, cpt);
          break;
        }
        default: out += e;  // \" \\ \/
      }
    }
    return out;
  }
  Json value() {
    skip_ws();
    Json v;
    const char c = next();
    if (c == '{') {
      v.kind = Json::Object;
      skip_ws();
      if (s_[pos_] == '}') return ++pos_, v;
      do {
        skip_ws();
        REQUIRE(next() == '"');
        std::string key = string_body();
        skip_ws();
        REQUIRE(next() == ':');
        v.fields[key] = value();
        skip_ws();
      } while (next() == ',');
    } else if (c == '[') {
      v.kind = Json::Array;
      skip_ws();
      if (s_[pos_] == ']') return ++pos_, v;
      do {
        v.items.push_back(value());
        skip_ws();
      } while (next() == ',');
    } else if (c == '"') {
      v.kind = Json::String;
      v.str = string_body();
    } else if (c == 't' || c == 'f' || c == 'n') {
      --pos_;
      if (c == 'n') return expect("null"), v;
      v.kind = Json::Bool;
      v.b = c == 't';
      expect(v.b ? "true" : "false");
    } else {
      --pos_;
      size_t used = 0;
      v.kind = Json::Number;
      v.number = std::stod(std::string(s_.substr(pos_, 40)), &used);
      pos_ += used;
    }
    return v;
  }
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

// ---- llama.cpp's test vectors ---------------------------------------------------------------------------------------

TEST_CASE("tokenizer: llama.cpp vectors, llama-spm (SentencePiece)") { check_vocab("llama-spm"); }
TEST_CASE("tokenizer: llama.cpp vectors, phi-3 (SentencePiece)") { check_vocab("phi-3"); }
TEST_CASE("tokenizer: llama.cpp vectors, llama-bpe (Llama 3 BPE)") { check_vocab("llama-bpe"); }
TEST_CASE("tokenizer: llama.cpp vectors, qwen2 (BPE)") { check_vocab("qwen2"); }
TEST_CASE("tokenizer: llama.cpp vectors, gpt-2 (BPE)") { check_vocab("gpt-2"); }
TEST_CASE("tokenizer: llama.cpp vectors, command-r (BPE, its own pre-tokenizer)") {
  check_vocab(vocab_files("next/vocab", "command-r"));
}
TEST_CASE("tokenizer: llama.cpp vectors, gemma-4 (SPM-style BPE, tokenizer model gemma4)") {
  check_vocab(vocab_files("next/vocab", "gemma-4"));
}

// Vocabularies beyond the named ones: any other set in vocab/ or next/vocab/, and every set in the folder named by
// GRETA_EXTRA_VOCAB_DIR (e.g. llama.cpp's models/, whose .gguf files are not compressed).
TEST_CASE("tokenizer: llama.cpp vectors, every other vocabulary found") {
  const std::set<std::string> named = {"llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2", "command-r", "gemma-4"};
  std::vector<VocabFiles> sets;
  for (const char* dir : {"vocab", "next/vocab"})
    for (const VocabFiles& v : vocabs_in(test::shared_path(dir)))
      if (!named.count(v.name)) sets.push_back(v);
  if (const char* extra = std::getenv("GRETA_EXTRA_VOCAB_DIR"))
    for (const VocabFiles& v : vocabs_in(extra)) sets.push_back(v);
  for (const VocabFiles& v : sets) {
    CAPTURE(v.gguf);
    // llama.cpp's test set also holds tokenizer models GRETA does not implement (t5: Unigram, ...); those are skipped.
    const std::string model(GgufFile::open(v.gguf).get_string("tokenizer.ggml.model").value_or(""));
    if (model != "llama" && model != "gpt2" && model != "gemma4" && model != "bert") {
      MESSAGE(v.name, ": tokenizer model '", model, "' is not supported, skipped");
      continue;
    }
    check_vocab(v);
  }
}

TEST_CASE("tokenizer: vocabulary metadata and special ids as llama.cpp sets them") {
  const Tokenizer& spm = shared_vocab("llama-spm");
  CHECK(spm.kind() == "llama");
  CHECK(spm.vocab_size() == 32000);
  CHECK(spm.bos() == 1);
  CHECK(spm.eos() == 2);
  CHECK(spm.eot() == -1);
  CHECK(spm.add_bos());
  CHECK_FALSE(spm.add_eos());
  CHECK(spm.is_control(1));
  CHECK_FALSE(spm.is_control(15043));
  CHECK(spm.is_end_of_generation(2));
  CHECK_FALSE(spm.is_end_of_generation(1));

  const Tokenizer& phi3 = shared_vocab("phi-3");
  CHECK(phi3.eos() == 32000);
  CHECK(phi3.eot() == 32007);  // "<|end|>", found by its text
  CHECK(phi3.is_end_of_generation(32000));
  CHECK(phi3.is_end_of_generation(32007));
  CHECK_FALSE(phi3.is_end_of_generation(32010));  // <|user|>

  const Tokenizer& llama3 = shared_vocab("llama-bpe");
  CHECK(llama3.kind() == "gpt2");
  CHECK(llama3.pre_tokenizer() == "llama-bpe");
  CHECK(llama3.bos() == 128000);
  CHECK(llama3.add_bos());  // the llama3 pre-tokenizer's default
  CHECK(llama3.eot() == 128009);
  CHECK(llama3.is_end_of_generation(128001));
  CHECK(llama3.is_end_of_generation(128009));
  CHECK_FALSE(llama3.is_end_of_generation(9906));

  const Tokenizer& qwen2 = shared_vocab("qwen2");
  CHECK_FALSE(qwen2.add_bos());
  CHECK(qwen2.eos() == 151643);
  CHECK(qwen2.eot() == 151645);  // <|im_end|>
  CHECK(qwen2.is_end_of_generation(151645));

  const Tokenizer& gpt2 = shared_vocab("gpt-2");
  CHECK_FALSE(gpt2.add_bos());
  CHECK(gpt2.eot() == 50256);

  const Tokenizer& command_r = any_vocab("command-r");
  CHECK(command_r.bos() == 5);
  CHECK(command_r.add_bos());
  CHECK(command_r.is_end_of_generation(255001));

  const Tokenizer& gemma4 = any_vocab("gemma-4");
  CHECK(gemma4.kind() == "gemma4");
  CHECK(gemma4.bos() == 2);
  CHECK(gemma4.eos() == 1);
  CHECK(gemma4.add_bos());
  CHECK(gemma4.is_end_of_generation(1));
  const std::vector<TokenId> turn_end = gemma4.encode("<turn|>", false, true);
  REQUIRE(turn_end.size() == 1);
  CHECK(gemma4.is_end_of_generation(turn_end[0]));  // gemma4's end of turn, found by its text
  CHECK(gemma4.encode("Hello", true).front() == 2);

  // add_special adds BOS only where the model asks for it; empty text gives nothing else.
  CHECK(spm.encode("", true) == std::vector<TokenId>{1});
  CHECK(spm.encode("", false).empty());
  CHECK(llama3.encode("", true) == std::vector<TokenId>{128000});
  CHECK(qwen2.encode("", true).empty());
  CHECK(spm.encode("Hello", true) == std::vector<TokenId>{1, 15043});
}

// ---- golden references ----------------------------------------------------------------------------------------------

TEST_CASE("tokenizer: the prompt tokens of every golden reference") {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(test::shared_path("golden")))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 20);
  std::map<std::string, Tokenizer> by_model;
  for (const auto& path : files) {
    CAPTURE(path.filename().string());
    const Json j = JsonParser(read_text(path.string())).parse();
    const std::string model = j["model"].str;
    auto it = by_model.find(model);
    if (it == by_model.end()) {
      const GgufFile file = GgufFile::open(test::shared_path("models/" + model));
      it = by_model.emplace(model, Tokenizer::from_gguf(file)).first;
    }
    const Tokenizer& tok = it->second;
    std::vector<TokenId> expected;
    for (const Json& id : j["prompt_tokens"].items) expected.push_back(static_cast<TokenId>(id.number));
    REQUIRE(expected.size() >= 4);
    CHECK(tok.add_bos() == j["add_bos"].b);
    CHECK(tok.vocab_size() == static_cast<int32_t>(j["n_vocab"].number));
    const std::vector<TokenId> ids = tok.encode(j["prompt"].str, /*add_special=*/j["add_bos"].b);
    CHECK_MESSAGE(ids == expected, "got      ", ids_string(ids), "\nexpected ", ids_string(expected));
    // Decoding drops the space SentencePiece put in front; a leading BOS would take that drop (as in llama.cpp).
    std::vector<TokenId> body(ids.begin() + (tok.add_bos() ? 1 : 0), ids.end());
    CHECK(tok.decode(body) == j["prompt"].str);
  }
}

TEST_CASE("tokenizer: lenient UTF-8 decoding follows llama.cpp") {
  using Cpts = std::vector<uint32_t>;
  CHECK(tok::decode_utf8_lenient("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80") == Cpts{'a', 0xE9, 0x4E2D, 0x1F600});
  CHECK(tok::decode_utf8_lenient("\x80z") == Cpts{0xFFFD, 'z'});          // stray continuation byte
  CHECK(tok::decode_utf8_lenient("\xe2\x96") == Cpts{0xFFFD, 0xFFFD});   // truncated sequence: one per byte
  CHECK(tok::decode_utf8_lenient("\xc0\x80") == Cpts{0});                // overlong forms are accepted
  CHECK(tok::decode_utf8_lenient("\xed\xa0\x80") == Cpts{0xD800});       // so are surrogates
  CHECK(tok::decode_utf8_lenient("\xf7\xbf\xbf\xbf") == Cpts{0x1FFFFF});  // and 4-byte forms past U+10FFFF
  CHECK(tok::decode_utf8_lenient("\xf8\xff") == Cpts{0xFFFD, 0xFFFD});
  std::string s;
  tok::append_utf8(s, 0x1FFFFF);
  CHECK(s == "\xef\xbf\xbd");
}

// ---- synthetic vocabularies -------------------------------------------------------------------------------------------

namespace {
// <unk> <s> </s> ▁ a b c ab bc <0xC3> <0xA9> ▁a
TokenizerVocab tiny_spm(float score_ab, float score_bc) {
  TokenizerVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "c", "ab", "bc", "<0xC3>", "<0xA9>", "\xe2\x96\x81" "a"};
  v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 1};
  v.scores = {0, 0, 0, -5, -5, -5, -5, score_ab, score_bc, 0, 0, -3};
  return v;
}
// Byte-level BPE over the letters a b c, "Ġ" (space) and "Ċ" (newline).
TokenizerVocab tiny_bpe(const std::string& pre) {
  TokenizerVocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.tokens = {"a", "b", "c", "\xc4\xa0", "\xc4\x8a", "ab", "aa", "\xc4\xa0" "a", "abc", "ca", "<|bos|>", "<|eos|>"};
  v.token_types = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3};
  v.merges = {"a b", "a a", "\xc4\xa0 a", "ab c"};
  v.bos = 10;
  v.eos = 11;
  return v;
}
}  // namespace

TEST_CASE("tokenizer: SentencePiece merges by score, ties to the left, bytes as fallback") {
  using Ids = std::vector<TokenId>;
  // "▁abc": bc (-1) beats ab (-2); then ▁a (-3); "abc" and "▁abc" are no tokens.
  const Tokenizer t1 = Tokenizer::from_vocab(tiny_spm(-2.f, -1.f));
  CHECK(t1.encode("abc", false) == Ids{11, 8});
  // Equal scores: the leftmost pair (ab) merges first, which leaves ▁ on its own.
  const Tokenizer t2 = Tokenizer::from_vocab(tiny_spm(-1.f, -1.f));
  CHECK(t2.encode("abc", false) == Ids{3, 7, 6});
  CHECK(t2.encode("abc", true) == Ids{1, 3, 7, 6});
  // No token for "é": its bytes; decode puts them back and drops the prefixed space.
  CHECK(t2.encode("\xc3\xa9", false) == Ids{3, 9, 10});
  CHECK(t2.decode({3, 9, 10}) == "\xc3\xa9");
  CHECK(t2.decode({1, 3, 9, 10}) == " \xc3\xa9");  // a leading BOS takes the space drop, as in llama.cpp
  CHECK(t2.decode({1, 3, 9, 10}, true) == "<s> \xc3\xa9");
  // A byte with no <0xNN> token becomes <unk>; spaces turn into ▁ everywhere.
  CHECK(t2.encode("a z", false) == Ids{11, 3, 0});
  // Without add_space_prefix no ▁ is put in front.
  TokenizerVocab no_prefix = tiny_spm(-1.f, -1.f);
  no_prefix.add_space_prefix = false;
  CHECK(Tokenizer::from_vocab(no_prefix).encode("abc", false) == Ids{7, 6});
}

TEST_CASE("tokenizer: BPE merges by rank, ties to the left, ignore_merges, unknown bytes dropped") {
  using Ids = std::vector<TokenId>;
  const Tokenizer gpt2 = Tokenizer::from_vocab(tiny_bpe("gpt-2"));
  CHECK(gpt2.encode("ab", false) == Ids{5});
  CHECK(gpt2.encode("aaa", false) == Ids{6, 0});  // (a a) a, not a (a a)
  CHECK(gpt2.encode("abc", false) == Ids{8});     // ab, then (ab c)
  CHECK(gpt2.encode("ab a", false) == Ids{5, 7});
  CHECK(gpt2.encode("ca", false) == Ids{2, 0});   // no merge makes "ca"
  CHECK(gpt2.encode("z", false).empty());         // no token for the byte: dropped, as llama.cpp does
  CHECK(gpt2.decode({5, 7, 4}) == "ab a\n");
  CHECK_FALSE(gpt2.add_bos());
  // The llama3 pre-tokenizer takes a word that is a token whole (ignore_merges) and adds BOS by default.
  const Tokenizer llama3 = Tokenizer::from_vocab(tiny_bpe("llama3"));
  CHECK(llama3.encode("ca", false) == Ids{9});
  CHECK(llama3.encode("ca", true) == Ids{10, 9});
  TokenizerVocab with_eos = tiny_bpe("gpt-2");
  with_eos.add_eos = true;
  CHECK(Tokenizer::from_vocab(with_eos).encode("ab", true) == Ids{5, 11});
}

TEST_CASE("tokenizer: gemma4, SPM-style BPE over raw UTF-8") {
  using Ids = std::vector<TokenId>;
  TokenizerVocab v;
  v.model = "gemma4";
  v.pre = "default";  // ignored: gemma4 has its own pre-tokenizer
  v.tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "\n", "\n\n",
              "<0x7A>", "ab"};
  v.token_types = {3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 6, 1};
  v.merges = {"\xe2\x96\x81 a", "\n \n", "a b"};
  v.bos = 2, v.eos = 1, v.unk = 3;
  v.add_bos = false;  // llama.cpp overrides this for gemma4
  const Tokenizer t = Tokenizer::from_vocab(v);
  CHECK(t.kind() == "gemma4");
  CHECK(t.pre_tokenizer() == "gemma4");
  CHECK(t.add_bos());
  // "a▁ab": ▁a (rank 0) merges before ab (rank 2) can; "\n\n" is a token and taken whole; "z" has no token: <0x7A>.
  CHECK(t.encode("a ab\n\nz", true) == Ids{2, 5, 7, 6, 9, 10});
  CHECK(t.decode({5, 7, 6, 9, 10}) == "a ab\n\nz");
  CHECK(t.decode({2, 5, 7}) == "a a");  // the BOS renders as nothing; no space-prefix stripping
  // Without a "\n\n\n" token the newline run is merged like any word.
  CHECK(t.encode("\n\n\n", false) == Ids{9, 8});
}

TEST_CASE("tokenizer: bert (WordPiece): splitting, lowercasing, accents, longest match, [UNK]") {
  using Ids = std::vector<TokenId>;
  using Words = std::vector<std::string>;
  const std::string p = "\xe2\x96\x81";  // U+2581 marks word-initial pieces
  TokenizerVocab v;
  v.model = "bert";
  v.pre = "bert-bge";  // not used by WordPiece
  v.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", p + "hello", p + "world", p + "u", p + "un", "a", "af", "aff",
              "able", p + ",", p + "!", p + "+", p + "cafe", p + "\xe4\xb8\xad" /* 中 */, p + "a"};
  v.token_types = {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  v.bos = 2, v.sep = 3, v.unk = 1, v.pad = 0;
  const Tokenizer t = Tokenizer::from_vocab(v);
  CHECK(t.kind() == "bert");
  CHECK(t.bos() == 2);
  CHECK(t.add_bos());
  CHECK_FALSE(t.add_eos());

  // Whitespace separates words; punctuation, ASCII symbols and CJK ideographs are words of their own; control
  // characters vanish; NFD + dropped marks strip accents; everything is lowercased.
  const tok::WpmOptions options;
  CHECK(tok::wpm_split("  H\xc3\xa9llo,\tWOR\x01LD!\xe4\xb8\xad\xe6\x96\x87x a+b\n", options) ==
        Words{"hello", ",", "world", "!", "\xe4\xb8\xad", "\xe6\x96\x87", "x", "a", "+", "b"});
  CHECK(tok::wpm_split("\xc3\x85ngstr\xc3\xb6m \xef\xbc\x81", options) == Words{"angstrom", "\xef\xbc\x81"});
  CHECK(tok::wpm_split("\xea\xb0\x80", options) == Words{"\xe1\x84\x80"});  // Hangul syllable -> leading jamo
  tok::WpmOptions cased;
  cased.lowercase = cased.strip_accents = false;
  CHECK(tok::wpm_split("Caf\xc3\xa9 X", cased) == Words{"Caf\xc3\xa9", "X"});

  CHECK(t.encode("Hello, WORLD!", false) == Ids{4, 12, 5, 13});
  CHECK(t.encode("hello+world", false) == Ids{4, 14, 5});
  CHECK(t.encode("CAF\xc3\x89 caf\xc3\xa9", false) == Ids{15, 15});
  // Longest match at every position: ▁un (not ▁u), aff (not af / a), able.
  CHECK(t.encode("unaffable", false) == Ids{7, 10, 11});
  CHECK(t.encode("a", false) == Ids{17});
  // A word with a gap no token covers is one [UNK], whatever matched before the gap; other words are unaffected.
  CHECK(t.encode("unaffablez hello", false) == Ids{1, 4});
  CHECK(t.encode("\xe4\xb8\xad\xe6\x96\x87", false) == Ids{16, 1});
  CHECK(t.encode(" \t\n", false).empty());
  // Special tokens: [CLS] ... [SEP] with add_special; their text only with parse_special.
  CHECK(t.encode("hello", true) == Ids{2, 4, 3});
  CHECK(t.encode("[CLS]hello", false, true) == Ids{2, 4});
  CHECK(t.encode("[CLS]", false, false) == Ids{1, 1, 1});  // "[", "cls", "]": no tokens
  // Decode: "▁" becomes a space, control tokens render as nothing, spaces before punctuation are cleaned up.
  CHECK(t.decode({2, 4, 12, 5, 13, 3}) == " hello, world!");
  CHECK(t.decode({2, 4, 12, 5, 13, 3}, true) == "[CLS] hello, world![SEP]");
  CHECK(t.decode({7, 10, 11}) == " unaffable");
  CHECK(t.token_to_piece(4) == " hello");
  // Without lowercasing (and so, by default, without accent stripping) "Hello" and "café" are no tokens.
  TokenizerVocab keep_case = v;
  keep_case.lowercase = false;
  CHECK(Tokenizer::from_vocab(keep_case).encode("Hello caf\xc3\xa9 cafe", false) == Ids{1, 1, 15});
  keep_case.strip_accents = true;
  CHECK(Tokenizer::from_vocab(keep_case).encode("caf\xc3\xa9", false) == Ids{15});
  // Random bytes (invalid UTF-8 included) give ids in the vocabulary, and NUL / U+FFFD are dropped like controls.
  CHECK(t.encode(std::string("hel\0lo\xff", 7), false) == Ids{4});
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 200; ++i) {
    std::string s(static_cast<size_t>(i % 37), '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    for (TokenId id : t.encode(s, true, true)) REQUIRE((id >= 0 && id < t.vocab_size()));
  }
}

TEST_CASE("tokenizer: inconsistent vocabularies are rejected with greta::Error") {
  TokenizerVocab bad_model = tiny_spm(0, 0);
  bad_model.model = "t5";
  CHECK_THROWS_AS(Tokenizer::from_vocab(bad_model), Error);
  CHECK_THROWS_AS(Tokenizer::from_vocab(tiny_bpe("no-such-pre")), Error);
  TokenizerVocab dup = tiny_spm(0, 0);
  dup.tokens[5] = "a";
  CHECK_THROWS_AS(Tokenizer::from_vocab(dup), Error);
  TokenizerVocab short_scores = tiny_spm(0, 0);
  short_scores.scores.resize(3);
  CHECK_THROWS_AS(Tokenizer::from_vocab(short_scores), Error);
  TokenizerVocab no_bos = tiny_bpe("gpt-2");
  no_bos.tokens.resize(5), no_bos.token_types.resize(5), no_bos.bos.reset(), no_bos.eos.reset();
  no_bos.add_bos = true;  // the default BOS (11) is outside 5 tokens
  CHECK_THROWS_AS(Tokenizer::from_vocab(no_bos), Error);
  TokenizerVocab empty;
  empty.model = "llama";
  CHECK_THROWS_AS(Tokenizer::from_vocab(empty), Error);

  const Tokenizer t = Tokenizer::from_vocab(tiny_spm(0, 0));
  CHECK_THROWS_AS(t.decode({3, 12}), Error);
  CHECK_THROWS_AS(t.token_to_piece(-1), Error);
  CHECK_THROWS_AS(t.token_text(99), Error);
  CHECK_FALSE(t.is_control(-5));
  CHECK_FALSE(t.is_end_of_generation(1 << 30));
}

// ---- special tokens -------------------------------------------------------------------------------------------------

TEST_CASE("tokenizer: special-token text is parsed only when asked") {
  using Ids = std::vector<TokenId>;
  const Tokenizer& llama3 = shared_vocab("llama-bpe");
  const std::string chat = "<|begin_of_text|>Hello<|eot_id|>";
  CHECK(llama3.encode(chat, false, true) == Ids{128000, 9906, 128009});
  const Ids plain = llama3.encode(chat, false, false);
  CHECK(plain.size() > 3);
  CHECK(std::find(plain.begin(), plain.end(), 128000) == plain.end());
  CHECK(llama3.decode(plain) == chat);
  CHECK(llama3.decode({128000, 9906, 128009}) == "Hello");
  CHECK(llama3.decode({128000, 9906, 128009}, true) == chat);
  CHECK(llama3.token_to_piece(128009) == "");
  CHECK(llama3.token_to_piece(128009, true) == "<|eot_id|>");
  CHECK(llama3.token_text(9906) == "Hello");

  // SentencePiece puts a space in front of the text after a special token too.
  const Tokenizer& spm = shared_vocab("llama-spm");
  CHECK(spm.encode("<s>Hello</s>", false, true) == Ids{1, 15043, 2});
  CHECK(spm.encode("Hello</s>Hello", false, true) == Ids{15043, 2, 15043});

  // Qwen2: chat markers; user-defined tokens ([PAD...]) are split out even without parse_special.
  const Tokenizer& qwen2 = shared_vocab("qwen2");
  const Ids msg = qwen2.encode("<|im_start|>user\nhi<|im_end|>", false, true);
  Ids inner = qwen2.encode("user\nhi", false);
  inner.insert(inner.begin(), 151644);
  inner.push_back(151645);
  CHECK(msg == inner);
  const Ids pad = qwen2.encode("a[PAD151646]b", false, false);
  CHECK(std::find(pad.begin(), pad.end(), 151646) != pad.end());
  CHECK(qwen2.decode(pad) == "a[PAD151646]b");

  // Phi-3: llama.cpp strips the whitespace after special tokens (RSTRIP) for models named phi-3.
  const Tokenizer& phi3 = shared_vocab("phi-3");
  CHECK(phi3.encode("<|user|>\nHello<|end|>\n<|assistant|>", false, true) ==
        phi3.encode("<|user|>Hello<|end|><|assistant|>", false, true));
  CHECK(phi3.encode("<|user|>Hello", false, true) == Ids{32010, 15043});
}

// ---- decode -----------------------------------------------------------------------------------------------------------

TEST_CASE("tokenizer: decode cleans up spaces where the pre-tokenizer asks for it") {
  const Tokenizer& gpt2 = shared_vocab("gpt-2");
  auto rt = [](const Tokenizer& t, const std::string& s) { return t.decode(t.encode(s, false)); };
  CHECK(rt(gpt2, "Hello , world ! Right ?") == "Hello, world! Right?");
  CHECK(rt(gpt2, "x ' y") == "x'y");
  CHECK(rt(gpt2, "it 's we 're I 'm they 've") == "it's we're I'm they've");
  CHECK(rt(gpt2, "don 't we 'll he 'd") == "don 't we 'll he 'd");
  CHECK(rt(shared_vocab("llama-bpe"), "a , b") == "a, b");
  CHECK(rt(shared_vocab("qwen2"), "Hello , world ! x ' y") == "Hello , world ! x ' y");  // qwen2: no clean-up
  CHECK(rt(shared_vocab("llama-spm"), "Hello , world !") == "Hello , world !");
}

TEST_CASE("tokenizer: single code points and random texts decode back to themselves") {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<uint32_t> any_cpt(1, 0x10FFFF);
  std::vector<uint32_t> cpts;
  for (uint32_t c = 1; c < 0x80; ++c) cpts.push_back(c);
  while (cpts.size() < 1500) {
    const uint32_t c = any_cpt(rng);
    if (c < 0xD800 || c > 0xDFFF) cpts.push_back(c);
  }
  for (const std::string name : {"llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2", "command-r", "gemma-4"}) {
    CAPTURE(name);
    const Tokenizer& tok = any_vocab(name);
    size_t failures = 0;
    for (uint32_t c : cpts) {
      if (escapes_spaces(tok) && c == 0x2581) continue;  // "▁" reads as a space
      const std::string s = utf8({c});
      const std::vector<TokenId> ids = tok.encode(s, false, false);
      if (tok.decode(ids) != s && ++failures <= 5) FAIL_CHECK("code point U+", std::hex, c, " -> ", ids_string(ids));
    }
    CHECK(failures == 0);
    const bool clean = tok.kind() != "llama" && tok::pre_tokenizer_config(tok.pre_tokenizer()).clean_spaces;
    for (int i = 0; i < 150; ++i) {
      const std::string s = random_text(rng, !clean);
      if (!round_trips(tok, s)) continue;
      CAPTURE(s);
      CHECK(tok.decode(tok.encode(s, false, false)) == s);
      CHECK(tok.decode(tok.encode(s, false, true)) == s);  // no special-token text in the pool
    }
  }
}

TEST_CASE("tokenizer: random bytes and invalid UTF-8 never crash and stay in the vocabulary") {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> len(0, 63), byte(0, 255);
  std::vector<std::string> inputs = {"\xff", "\x80\x80", "\xe2\x96", "\xc0\x80", "\xed\xa0\x80x",
                                     "\xf7\xbf\xbf\xbf", "\xf0\x9f\x98", std::string("a\0b", 3)};
  for (int i = 0; i < 120; ++i) {
    std::string s(static_cast<size_t>(len(rng)) | 1, '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    inputs.push_back(s);
  }
  for (const std::string name : {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "command-r", "gemma-4"}) {
    CAPTURE(name);
    const Tokenizer& tok = any_vocab(name);
    for (const std::string& s : inputs) {
      for (bool parse_special : {false, true}) {
        const std::vector<TokenId> ids = tok.encode(s, true, parse_special);
        for (TokenId id : ids) REQUIRE((id >= 0 && id < tok.vocab_size()));
        (void)tok.decode(ids, true);
      }
      const std::vector<TokenId> ids = tok.encode(s, false);
      if (tok.kind() == "llama") {
        // Byte fallback keeps every byte. Spaces are escaped to "▁" before the UTF-8 split, so where an invalid
        // lead byte swallows part of a "▁" its bytes come back as they are, still escaped (llama.cpp does the same).
        CHECK(spaces_unescaped(tok.decode(ids)) == spaces_unescaped(s));
      } else if (!tok::pre_tokenizer_config(tok.pre_tokenizer()).clean_spaces && !escapes_spaces(tok)) {
        std::string expected;  // invalid sequences come back as U+FFFD, like llama.cpp's decoding
        for (uint32_t c : tok::decode_utf8_lenient(s)) tok::append_utf8(expected, c);
        CHECK(tok.decode(ids) == expected);
      }
    }
  }
  // Overlong NUL reads as NUL (llama.cpp's lenient decoding), surrogates pass through as 3 bytes.
  CHECK(shared_vocab("qwen2").decode(shared_vocab("qwen2").encode("\xc0\x80", false)) == std::string(1, '\0'));
  CHECK(shared_vocab("qwen2").decode(shared_vocab("qwen2").encode("\xed\xa0\x80", false)) == "\xed\xa0\x80");
}
