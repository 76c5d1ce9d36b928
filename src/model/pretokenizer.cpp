// Lenient UTF-8, the pre-tokenizer table (tokenizer.ggml.pre -> split regexes + flags) and regex word splitting.
//
// llama.cpp splits BPE input with hand-written matchers for the GPT-2 and Llama-3 regexes and with std::regex over a
// "collapsed" text (one byte per code point, standing for its Unicode category) for the others. Both behave like a
// real Unicode regex engine whose \s, \p{L}, \p{N}, \p{P} follow llama.cpp's code point tables, so GRETA runs the
// original patterns through PCRE2 (UTF + UCP) directly. The only classification difference between PCRE2 10.42 and
// llama.cpp's tables is U+180E (PCRE2 counts it as \s, llama.cpp does not): before matching it is replaced by U+200B,
// which both classify alike (format character). Code points PCRE2 cannot hold in UTF-8 (surrogates from lenient
// decoding, values above U+10FFFF) are matched as U+FFFD, which classifies the same way for these patterns.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "model/tokenizer_internal.h"

namespace greta::model::tok {

// ---- UTF-8 ------------------------------------------------------------------------------------------------------------

std::vector<uint32_t> decode_utf8_lenient(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  const size_t n = text.size();
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[i])); };
  auto is_cont = [&](size_t i) { return i < n && (byte(i) & 0xC0) == 0x80; };
  size_t off = 0;
  while (off < n) {
    const uint32_t b0 = byte(off);
    if (!(b0 & 0x80)) {
      cpts.push_back(b0);
      off += 1;
    } else if (!(b0 & 0x40)) {  // stray continuation byte
      cpts.push_back(0xFFFD);
      off += 1;
    } else if (!(b0 & 0x20)) {
      if (is_cont(off + 1)) {
        cpts.push_back(((b0 & 0x1F) << 6) | (byte(off + 1) & 0x3F));
        off += 2;
      } else {
        cpts.push_back(0xFFFD);
        off += 1;
      }
    } else if (!(b0 & 0x10)) {
      if (is_cont(off + 1) && is_cont(off + 2)) {
        cpts.push_back(((b0 & 0x0F) << 12) | ((byte(off + 1) & 0x3F) << 6) | (byte(off + 2) & 0x3F));
        off += 3;
      } else {
        cpts.push_back(0xFFFD);
        off += 1;
      }
    } else if (!(b0 & 0x08)) {
      if (is_cont(off + 1) && is_cont(off + 2) && is_cont(off + 3)) {
        cpts.push_back(((b0 & 0x07) << 18) | ((byte(off + 1) & 0x3F) << 12) | ((byte(off + 2) & 0x3F) << 6) |
                       (byte(off + 3) & 0x3F));
        off += 4;
      } else {
        cpts.push_back(0xFFFD);
        off += 1;
      }
    } else {  // 0xF8..0xFF start nothing
      cpts.push_back(0xFFFD);
      off += 1;
    }
  }
  return cpts;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt > 0x10FFFF) cpt = 0xFFFD;
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {  // surrogates included, as llama.cpp writes them
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

// ---- Pre-tokenizer table ------------------------------------------------------------------------------------------

namespace {

// The patterns llama.cpp uses (its llama-vocab.cpp), with "(?i:...)" contractions spelled out as ASCII classes: PCRE2's
// caseless Unicode matching would also fold U+017F into 's', which llama.cpp's matcher does not.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama-3 but digits one at a time.
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kPoro = R"( ?[^(\s|.,!?…。，、।۔،)]+)";

enum class PreKind { Default, Llama3, Gpt2, Qwen2, Falcon, Starcoder, Viking, Poro };

struct PreName {
  const char* name;
  PreKind kind;
  bool clean_spaces;
  bool ignore_merges;
  bool add_bos;
  bool no_bos;
};

// tokenizer.ggml.pre names and the flags llama.cpp's vocabulary loader sets for them.
constexpr PreName kPreNames[] = {
    {"default", PreKind::Default, true, false, false, false},
    {"llama3", PreKind::Llama3, true, true, true, false},
    {"llama-v3", PreKind::Llama3, true, true, true, false},
    {"llama-bpe", PreKind::Llama3, true, true, true, false},
    {"falcon3", PreKind::Llama3, true, true, true, false},
    {"falcon-h1", PreKind::Llama3, true, true, true, false},
    {"pixtral", PreKind::Llama3, true, true, true, false},
    {"midm-2.0", PreKind::Llama3, true, true, true, false},
    {"lfm2", PreKind::Llama3, true, true, true, false},
    {"dbrx", PreKind::Llama3, true, false, false, false},
    {"smaug-bpe", PreKind::Llama3, true, false, false, false},
    {"glm4", PreKind::Llama3, true, false, false, true},
    {"chatglm-bpe", PreKind::Llama3, true, false, false, true},
    {"gpt-2", PreKind::Gpt2, true, false, false, false},
    {"phi-2", PreKind::Gpt2, true, false, false, false},
    {"jina-es", PreKind::Gpt2, true, false, false, false},
    {"jina-de", PreKind::Gpt2, true, false, false, false},
    {"gigachat", PreKind::Gpt2, true, false, false, false},
    {"jina-v2-es", PreKind::Gpt2, true, false, false, false},
    {"jina-v2-de", PreKind::Gpt2, true, false, false, false},
    {"a.x-4.0", PreKind::Gpt2, true, false, false, false},
    {"mellum", PreKind::Gpt2, true, false, false, false},
    {"modern-bert", PreKind::Gpt2, true, false, false, false},
    {"exaone4", PreKind::Gpt2, true, false, false, false},
    {"mpt", PreKind::Gpt2, true, false, false, false},
    {"olmo", PreKind::Gpt2, true, false, false, false},
    {"jais", PreKind::Gpt2, true, false, false, false},
    {"trillion", PreKind::Gpt2, false, false, false, false},
    {"granite-docling", PreKind::Gpt2, false, false, false, false},
    {"qwen2", PreKind::Qwen2, false, false, false, false},
    {"deepseek-r1-qwen", PreKind::Qwen2, false, false, false, false},
    {"kormo", PreKind::Qwen2, false, false, false, false},
    {"f2llmv2", PreKind::Qwen2, false, false, false, false},
    {"megrez", PreKind::Qwen2, true, false, false, false},
    {"stablelm2", PreKind::Qwen2, true, false, false, false},
    {"hunyuan", PreKind::Qwen2, false, false, false, false},
    {"solar-open", PreKind::Qwen2, false, false, false, false},
    {"falcon", PreKind::Falcon, true, false, false, false},
    {"starcoder", PreKind::Starcoder, true, false, false, false},
    {"refact", PreKind::Starcoder, true, false, false, false},
    {"command-r", PreKind::Starcoder, false, false, false, false},
    {"smollm", PreKind::Starcoder, false, false, false, false},
    {"codeshell", PreKind::Starcoder, true, false, false, false},
    {"exaone", PreKind::Starcoder, true, false, false, false},
    {"minerva-7b", PreKind::Starcoder, true, false, false, false},
    {"mellum2", PreKind::Starcoder, true, false, false, false},
    {"viking", PreKind::Viking, false, false, false, false},
    {"poro-chat", PreKind::Poro, false, false, false, false},
    {"bloom", PreKind::Poro, true, false, false, false},
    {"gpt3-finnish", PreKind::Poro, true, false, false, false},
};

std::vector<std::string> patterns_for(PreKind kind) {
  switch (kind) {
    case PreKind::Default:
      return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    case PreKind::Llama3: return {kLlama3};
    case PreKind::Gpt2: return {kGpt2};
    case PreKind::Qwen2: return {kQwen2};
    case PreKind::Falcon: return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    case PreKind::Starcoder: return {R"(\p{N})", kGpt2};
    case PreKind::Viking: return {kPoro, R"(\p{N})"};
    case PreKind::Poro: return {kPoro};
  }
  return {};
}

}  // namespace

PreTokenizerConfig pre_tokenizer_config(std::string_view pre_name) {
  if (pre_name.empty()) pre_name = "default";  // llama.cpp warns and uses the default split
  for (const PreName& p : kPreNames) {
    if (pre_name != p.name) continue;
    PreTokenizerConfig cfg;
    cfg.patterns = patterns_for(p.kind);
    cfg.clean_spaces = p.clean_spaces;
    cfg.ignore_merges = p.ignore_merges;
    cfg.add_bos = p.add_bos;
    cfg.no_bos = p.no_bos;
    return cfg;
  }
  fail("unsupported pre-tokenizer '", pre_name, "' (tokenizer.ggml.pre)");
}

// ---- Regex splitting ----------------------------------------------------------------------------------------------

struct PcreCodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct PcreMatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

struct PreTokenizer::Regex {
  std::unique_ptr<pcre2_code, PcreCodeDeleter> code;
  std::string pattern;
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail("pre-tokenizer regex does not compile at offset ", error_offset, ": ", reinterpret_cast<char*>(message));
    }
    auto regex = std::make_unique<Regex>();
    regex->code.reset(code);
    regex->pattern = pattern;
    // JIT when the platform has it (several times faster); pcre2_match falls back to the interpreter otherwise.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(regex));
  }
}

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

namespace {

// The code point PCRE2 sees for `cpt` (see the file comment).
uint32_t matchable(uint32_t cpt) {
  if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) return 0xFFFD;
  if (cpt == 0x180E) return 0x200B;
  return cpt;
}

// One pcre2_match; the JIT's fixed stack can run out on huge inputs, then the interpreter (heap frames) retries.
int match_once(const pcre2_code* code, const char* subject, size_t length, size_t start, pcre2_match_data* md) {
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject), length, start, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject), length, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                     md, nullptr);
  return rc;
}

}  // namespace

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cpts = decode_utf8_lenient(text);
  const size_t n = cpts.size();

  // Subject text for PCRE2 and the maps between its byte offsets and code point indices.
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<size_t> byte_of_cpt(n + 1);
  for (size_t i = 0; i < n; ++i) {
    byte_of_cpt[i] = subject.size();
    append_utf8(subject, matchable(cpts[i]));
  }
  byte_of_cpt[n] = subject.size();
  std::vector<uint32_t> cpt_of_byte(subject.size() + 1, 0);
  for (size_t i = 0; i <= n; ++i) cpt_of_byte[byte_of_cpt[i]] = static_cast<uint32_t>(i);

  // Pieces as code point counts, in order (llama.cpp's "bpe_offsets").
  std::vector<size_t> pieces = {n};
  for (const auto& regex : regexes_) {
    std::unique_ptr<pcre2_match_data, PcreMatchDataDeleter> md(
        pcre2_match_data_create_from_pattern(regex->code.get(), nullptr));
    if (!md) throw std::bad_alloc();
    std::vector<size_t> next;
    next.reserve(pieces.size());
    size_t piece_start = 0;
    for (size_t piece_len : pieces) {
      // Each piece is matched on its own: lookarounds see neither the text before nor after it.
      const size_t b0 = byte_of_cpt[piece_start], b1 = byte_of_cpt[piece_start + piece_len];
      const char* sub = subject.data() + b0;
      const size_t len = b1 - b0;
      auto cpt_count = [&](size_t from, size_t to) { return cpt_of_byte[b0 + to] - cpt_of_byte[b0 + from]; };
      size_t pos = 0, last_end = 0;
      while (pos < len) {
        const int rc = match_once(regex->code.get(), sub, len, pos, md.get());
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          fail("pre-tokenizer regex failed on the input: ", reinterpret_cast<char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t s = ov[0], e = ov[1];
        if (e <= s) {  // empty match (none of the shipped patterns has one): step over one code point
          if (s >= len) break;
          pos = s + utf8_sequence_length(sub[s]);
          continue;
        }
        if (s > last_end) next.push_back(cpt_count(last_end, s));  // unmatched gap: a word of its own
        next.push_back(cpt_count(s, e));
        last_end = pos = e;
      }
      if (last_end < len) next.push_back(cpt_count(last_end, len));
      piece_start += piece_len;
    }
    pieces = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (size_t piece_len : pieces) {
    std::string word;
    for (size_t i = start; i < start + piece_len; ++i) append_utf8(word, cpts[i]);
    words.push_back(std::move(word));
    start += piece_len;
  }
  return words;
}

}  // namespace greta::model::tok
