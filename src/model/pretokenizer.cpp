// Lenient UTF-8 and regex word splitting (the pre-tokenizer table is in pretokenizer_table.cpp).
//
// llama.cpp splits BPE input with hand-written matchers for some patterns and std::regex for the others (see
// pretokenizer_table.cpp); the patterns there are written so that PCRE2 (UTF + UCP) gives the same splits, with \s,
// \p{L}, \p{N}, \p{P}, \p{M}, \p{S} following llama.cpp's code point tables. Where PCRE2's classification differs
// (newer Unicode assignments, U+180E), the subject text carries a stand-in code point that PCRE2 classifies as
// llama.cpp classifies the original (kStandIns). Code points PCRE2 cannot hold in UTF-8 are matched as code points of
// the same class and inside the same literal ranges: surrogates (from lenient decoding) as U+E000, values above
// U+10FFFF as U+10FFFF. Words keep the original code points.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <iterator>

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

// Code points that llama.cpp's tables (Unicode 15.1) classify differently from PCRE2 10.42's (Unicode 14): each range
// is matched as a stand-in of llama.cpp's class (letter U+10000, mark U+101FD, punctuation U+10100, number U+10107,
// symbol U+1F300, other U+200B), or, where a pattern's literal range holds the original (U+0800-U+4E00 in the
// DeepSeek patterns, U+0E80-U+0EFF in AFMoE's, Kimi-K2's Han ranges), one of the same class inside that range.
// U+180E is whitespace to PCRE2 only. Generated by comparing both classifications over every code point.
struct StandIn {
  uint32_t first, last, stand_in;
};
constexpr StandIn kStandIns[] = {
    {0xCF3, 0xCF3, 0xCBC}, {0xECE, 0xECE, 0xEB1}, {0x180E, 0x180E, 0x200B}, {0x2FFC, 0x2FFF, 0x2FF0},
    {0x31EF, 0x31EF, 0x2FF0}, {0x10EFD, 0x10EFF, 0x101FD}, {0x1123F, 0x11240, 0x10000}, {0x11241, 0x11241, 0x101FD},
    {0x11B00, 0x11B09, 0x10100}, {0x11F00, 0x11F01, 0x101FD}, {0x11F02, 0x11F02, 0x10000},
    {0x11F03, 0x11F03, 0x101FD}, {0x11F04, 0x11F10, 0x10000}, {0x11F12, 0x11F33, 0x10000},
    {0x11F34, 0x11F3A, 0x101FD}, {0x11F3E, 0x11F42, 0x101FD}, {0x11F43, 0x11F4F, 0x10100},
    {0x11F50, 0x11F59, 0x10107}, {0x1342F, 0x1342F, 0x10000}, {0x13440, 0x13440, 0x101FD},
    {0x13441, 0x13446, 0x10000}, {0x13447, 0x13455, 0x101FD}, {0x1B132, 0x1B132, 0x10000},
    {0x1B155, 0x1B155, 0x10000}, {0x1D2C0, 0x1D2D3, 0x10107}, {0x1DF25, 0x1DF2A, 0x10000},
    {0x1E030, 0x1E06D, 0x10000}, {0x1E08F, 0x1E08F, 0x101FD}, {0x1E4D0, 0x1E4EB, 0x10000},
    {0x1E4EC, 0x1E4EF, 0x101FD}, {0x1E4F0, 0x1E4F9, 0x10107}, {0x1F6DC, 0x1F6DC, 0x1F300},
    {0x1F774, 0x1F776, 0x1F300}, {0x1F77B, 0x1F77F, 0x1F300}, {0x1F7D9, 0x1F7D9, 0x1F300},
    {0x1FA75, 0x1FA77, 0x1F300}, {0x1FA87, 0x1FA88, 0x1F300}, {0x1FAAD, 0x1FAAF, 0x1F300},
    {0x1FABB, 0x1FABD, 0x1F300}, {0x1FABF, 0x1FABF, 0x1F300}, {0x1FACE, 0x1FACF, 0x1F300},
    {0x1FADA, 0x1FADB, 0x1F300}, {0x1FAE8, 0x1FAE8, 0x1F300}, {0x1FAF7, 0x1FAF8, 0x1F300},
    {0x2B739, 0x2B739, 0x2A700}, {0x2EBF0, 0x2EE5D, 0x10000}, {0x31350, 0x323AF, 0x10000},
};

// The code point PCRE2 sees for `cpt` (see the file comment).
uint32_t matchable(uint32_t cpt) {
  if (cpt < kStandIns[0].first) return cpt;
  if (cpt >= 0xD800 && cpt <= 0xDFFF) return 0xE000;
  if (cpt > 0x10FFFF) return 0x10FFFF;
  const StandIn* end = std::end(kStandIns);
  const StandIn* it = std::upper_bound(std::begin(kStandIns), end, cpt,
                                       [](uint32_t c, const StandIn& r) { return c < r.first; });
  if (it != std::begin(kStandIns) && cpt <= (it - 1)->last) return (it - 1)->stand_in;
  return cpt;
}

// One pcre2_match; the JIT's fixed stack can run out on huge inputs, then the interpreter (heap frames) retries.
int match_once(const pcre2_code* code, const char* subject, size_t length, size_t start, pcre2_match_data* md,
               uint32_t options) {
  options |= PCRE2_NO_UTF_CHECK;
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject), length, start, options, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject), length, start, options | PCRE2_NO_JIT, md, nullptr);
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
      // std::regex_iterator's walk: after an empty match it first tries a non-empty match at the same place, then
      // searches on from the next code point. An empty match still ends the gap before it (llama.cpp's empty word
      // there yields no tokens, so it is left out).
      size_t pos = 0, last_end = 0;
      bool after_empty = false;
      while (pos < len) {
        int rc = match_once(regex->code.get(), sub, len, pos, md.get(),
                            after_empty ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0);
        if (rc == PCRE2_ERROR_NOMATCH && after_empty) {
          pos += utf8_sequence_length(sub[pos]);
          after_empty = false;
          if (pos >= len) break;
          rc = match_once(regex->code.get(), sub, len, pos, md.get(), 0);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          fail("pre-tokenizer regex failed on the input: ", reinterpret_cast<char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t s = ov[0], e = ov[1];
        if (s > last_end) next.push_back(cpt_count(last_end, s));  // unmatched gap: a word of its own
        if (e > s) next.push_back(cpt_count(s, e));
        last_end = pos = e;
        after_empty = e == s;
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
