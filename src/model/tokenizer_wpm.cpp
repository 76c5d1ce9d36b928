// WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp's WPM tokenizer: BERT-style normalization and word
// splitting, then greedy longest-match over the vocabulary. GGUF bert vocabularies store word-initial pieces with a
// leading U+2581 ("▁hello") and continuation pieces bare ("##ing" becomes "ing"), so every word is matched as
// "▁" + word. The Unicode data (categories, lowercase, NFD) is generated: tokenizer_wpm_unicode.cpp.
#include <algorithm>

#include "model/tokenizer_internal.h"

namespace greta::model::tok {

namespace {

enum CharClass : uint32_t { kOther = 0, kControl = 1, kMark = 2, kPunctuation = 3 };

CharClass char_class(uint32_t cpt) {
  using namespace wpm_data;
  if (cpt > 0x10FFFF) return kOther;  // undefined
  const uint32_t* end = kClassRanges + kClassRangeCount;
  // The last range starting at or before cpt (the table starts at 0).
  const uint32_t* it = std::upper_bound(kClassRanges, end, cpt, [](uint32_t c, uint32_t e) { return c < (e >> 2); });
  return static_cast<CharClass>(*(it - 1) & 3u);
}

// Simple (one-to-one) lowercase mapping.
uint32_t to_lower(uint32_t cpt) {
  using namespace wpm_data;
  if (cpt < 0x80) return cpt >= 'A' && cpt <= 'Z' ? cpt + 32 : cpt;
  const LowerRun* end = kLowerRuns + kLowerRunCount;
  const LowerRun* it =
      std::upper_bound(kLowerRuns, end, cpt, [](uint32_t c, const LowerRun& r) { return c < r.first; });
  if (it == kLowerRuns) return cpt;
  const LowerRun& r = *(it - 1);
  const uint32_t offset = cpt - r.first;
  if (offset % r.stride != 0 || offset / r.stride >= r.count) return cpt;
  return static_cast<uint32_t>(static_cast<int64_t>(cpt) + r.delta);
}

// The first code point of the canonical decomposition (the base letter; the marks that follow are what accent
// stripping removes, so llama.cpp keeps only this one).
uint32_t nfd_base(uint32_t cpt) {
  using namespace wpm_data;
  if (cpt < 0xC0) return cpt;
  if (cpt >= 0xAC00 && cpt <= 0xD7A3) return 0x1100 + (cpt - 0xAC00) / 588;  // Hangul syllable -> leading jamo
  const NfdRun* end = kNfdRuns + kNfdRunCount;
  const NfdRun* it = std::upper_bound(kNfdRuns, end, cpt, [](uint32_t c, const NfdRun& r) { return c < r.first; });
  if (it == kNfdRuns) return cpt;
  const NfdRun& r = *(it - 1);
  return cpt <= r.last ? r.base : cpt;
}

// Unicode White_Space (llama.cpp's list).
bool is_whitespace(uint32_t cpt) {
  if (cpt <= 0x20) return cpt == 0x20 || (cpt >= 0x09 && cpt <= 0x0D);
  switch (cpt) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cpt >= 0x2000 && cpt <= 0x200A;
  }
}

// ASCII characters of the Unicode symbol categories (Sc, Sk, Sm): $ + < = > ^ ` | ~
bool is_ascii_symbol(uint32_t cpt) {
  switch (cpt) {
    case '$': case '+': case '<': case '=': case '>': case '^': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

// The CJK ranges of HF's BertPreTokenizer (with its 0x2B920 lower bound, as llama.cpp copies it).
bool is_chinese_char(uint32_t cpt) {
  return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) || (cpt >= 0x20000 && cpt <= 0x2A6DF) ||
         (cpt >= 0x2A700 && cpt <= 0x2B73F) || (cpt >= 0x2B740 && cpt <= 0x2B81F) ||
         (cpt >= 0x2B920 && cpt <= 0x2CEAF) || (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

constexpr std::string_view kWordPrefix = "\xe2\x96\x81";  // U+2581

}  // namespace

std::vector<std::string> wpm_split(std::string_view text, const WpmOptions& options) {
  std::vector<std::string> words(1);
  for (uint32_t cpt : decode_utf8_lenient(text)) {
    if (options.strip_accents) cpt = nfd_base(cpt);
    if (is_whitespace(cpt)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const CharClass cls = char_class(cpt);
    if (cpt == 0 || cpt == 0xFFFD || cls == kControl) continue;
    if (options.strip_accents && cls == kMark) continue;
    const uint32_t out = options.lowercase ? to_lower(cpt) : cpt;
    if (cls == kPunctuation || is_ascii_symbol(cpt) || is_chinese_char(cpt)) {
      if (!words.back().empty()) words.emplace_back();
      append_utf8(words.back(), out);  // a word of its own
      words.emplace_back();
    } else {
      append_utf8(words.back(), out);
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void wpm_encode(const TokenTable& table, const WpmOptions& options, std::string_view text, std::vector<TokenId>& out) {
  std::string word1;
  for (const std::string& word : wpm_split(text, options)) {
    word1.assign(kWordPrefix);
    word1 += word;
    const std::string_view w = word1;
    const size_t n = w.size(), start = out.size();
    // Longest match at every position; llama.cpp compares byte strings, so partial UTF-8 never matches a token.
    for (size_t i = 0; i < n;) {
      size_t matched = 0;
      for (size_t j = std::min(n, i + options.max_token_len + 1); j > i; --j) {
        const TokenId id = table.find(w.substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          matched = j - i;
          break;
        }
      }
      if (matched == 0) {  // a gap: the whole word is unknown
        out.resize(start);
        break;
      }
      i += matched;
    }
    if (out.size() == start && options.unk >= 0) out.push_back(options.unk);
  }
}

}  // namespace greta::model::tok
