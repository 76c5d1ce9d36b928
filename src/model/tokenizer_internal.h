// Internals shared by the tokenizer's translation units (not part of the public API).
//
// The algorithms follow llama.cpp's llama-vocab.cpp / unicode.cpp so that GRETA produces the same ids:
//   tokenizer_spm.cpp  SentencePiece-style bigram merging driven by token scores, byte fallback to <0xNN>
//   tokenizer_wpm.cpp  WordPiece (bert): BERT normalization and splitting, greedy longest-match subwords
//   tokenizer_wpm_unicode.cpp  generated Unicode data for it (categories, lowercase, NFD first code points)
//   tokenizer_bpe.cpp  byte-level BPE: ranked merges inside each pre-tokenized word, GPT-2 byte <-> text mapping
//   pretokenizer.cpp   lenient UTF-8 decoding and the regex word splitting (PCRE2, Unicode properties)
//   pretokenizer_table.cpp  tokenizer.ggml.pre names -> split patterns and flags
//   tokenizer.cpp      vocabulary set-up, special-token partitioning, encode/decode
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace greta::model::tok {

// Token attributes: llama.cpp's llama_token_attr bits (a token may carry several, e.g. CONTROL|RSTRIP).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLStrip = 1u << 7,  // strip whitespace to the left of the token's text when splitting specials out
  kAttrRStrip = 1u << 8,  // ... and to the right
};

struct TokenEntry {
  std::string text;
  float score = 0.f;
  uint32_t attr = kAttrNormal;
};

// Hash/equality that accept std::string_view, so lookups do not build temporary strings.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The vocabulary: id -> entry and text -> id.
struct TokenTable {
  std::vector<TokenEntry> entries;
  StringIdMap ids;

  TokenId find(std::string_view text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
  int32_t size() const { return static_cast<int32_t>(entries.size()); }
};

// ---- UTF-8 (llama.cpp's lenient rules) ----------------------------------------------------------------------------
// Length of the sequence a lead byte announces, from its high nibble alone (continuation bytes count as 1).
inline size_t utf8_sequence_length(char lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[static_cast<uint8_t>(lead) >> 4];
}
// Decodes like llama.cpp's unicode_cpts_from_utf8: structurally valid sequences are accepted as they are (overlong
// forms and surrogates included, 4-byte forms up to 0x1FFFFF); every byte that starts no valid sequence becomes
// U+FFFD.
std::vector<uint32_t> decode_utf8_lenient(std::string_view text);
// Appends the UTF-8 form of `cpt`; code points above U+10FFFF (which llama.cpp cannot encode) become U+FFFD.
void append_utf8(std::string& out, uint32_t cpt);

// ---- Pre-tokenizer (regex word splitting for BPE vocabularies) -----------------------------------------------------
// What tokenizer.ggml.pre selects: the split regexes and the llama.cpp flags that come with the name.
struct PreTokenizerConfig {
  std::vector<std::string> patterns;  // applied one after the other, each splitting the previous pieces further
  bool clean_spaces = true;           // decode: llama.cpp's clean_up_tokenization_spaces passes
  bool ignore_merges = false;         // a word that is itself a token is emitted whole
  bool add_bos = false;               // default for add_bos_token
  bool no_bos = false;                // the name disables the BOS token (chatglm)
  bool byte_encode = true;            // words go through the GPT-2 byte mapping; false: raw UTF-8, bytes as <0xNN>
  bool escape_spaces = false;         // SPM-style BPE (gemma4): ' ' -> U+2581 before splitting, and back in decode
  bool newline_runs_whole = false;    // gemma4: a word of only '\n' that is a token is emitted whole
  bool force_add_bos = false;         // gemma4: BOS is added even where add_bos_token says false
};
// Throws greta::Error naming an unsupported pre-tokenizer.
PreTokenizerConfig pre_tokenizer_config(std::string_view pre_name);
// Every name pre_tokenizer_config accepts (llama.cpp's names, aliases included).
std::vector<std::string_view> pre_tokenizer_names();

class PreTokenizer {
public:
  // Compiles the patterns (PCRE2, UTF + Unicode properties); throws greta::Error if one does not compile.
  explicit PreTokenizer(const std::vector<std::string>& patterns);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Splits text into words the way llama.cpp's unicode_regex_split does: every pattern splits every current piece
  // into its matches and the unmatched gaps between them. Words come back as UTF-8 (invalid input bytes -> U+FFFD).
  std::vector<std::string> split(std::string_view text) const;

private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

// ---- GPT-2 byte-level mapping ---------------------------------------------------------------------------------------
// Every byte maps to a printable code point (printable Latin-1 maps to itself; the rest to U+0100.. in order), so
// byte strings become vocabulary text and back.
class ByteLevelCodec {
public:
  ByteLevelCodec();
  // Maps every byte of `bytes` to its code point's UTF-8.
  std::string encode(std::string_view bytes) const;
  // The inverse for one vocabulary string; code points outside the mapping become "[UNK_BYTE_0x..]" as in
  // llama.cpp's llama_decode_text.
  std::string decode(std::string_view text) const;

private:
  std::array<std::string, 256> byte_text_;
  std::array<int16_t, 0x144> cpt_byte_;  // code point -> byte, -1 when unmapped (the mapping ends at U+0143)
};

// ---- SPM ------------------------------------------------------------------------------------------------------------
// Tokenizes `text` (spaces already escaped to U+2581) by repeatedly merging the adjacent pair whose concatenation is
// the highest-scoring token; pieces that form no token fall back to <0xNN> byte tokens (or `unk`).
void spm_encode(const TokenTable& table, TokenId unk, std::string_view text, std::vector<TokenId>& out);

// ---- BPE ------------------------------------------------------------------------------------------------------------
class BpeRanks {
public:
  // `merges` in rank order, each "left right" split at the first space after the first byte; the first occurrence of
  // a pair keeps its rank.
  explicit BpeRanks(const std::vector<std::string>& merges);
  // -1 when the pair never merges; `scratch` is the caller's buffer for the lookup key (no allocation per call).
  int rank(std::string_view left, std::string_view right, std::string& scratch) const;
  size_t size() const { return ranks_.size(); }

private:
  StringIdMap ranks_;  // keyed by (left, right), see pair_key in tokenizer_bpe.cpp
};

struct BpeWordOptions {
  bool ignore_merges = false;       // a word that is itself a token is emitted whole
  bool newline_runs_whole = false;  // ... and so is a word of only '\n' (gemma4)
  bool hex_byte_tokens = false;     // byte fallback through <0xNN> tokens (raw UTF-8 words) instead of single bytes
};
// Tokenizes one word (byte-level encoded, or raw UTF-8 for SPM-style BPE): lowest-rank adjacent pair first, ties to
// the leftmost. Symbols that end up as no token are emitted byte by byte where those bytes are tokens, else dropped
// (as llama.cpp does).
void bpe_encode_word(const TokenTable& table, const BpeRanks& ranks, const BpeWordOptions& options,
                     std::string_view word, std::vector<TokenId>& out);

// ---- WPM (WordPiece, tokenizer model "bert") -----------------------------------------------------------------------
struct WpmOptions {
  TokenId unk = -1;           // emitted for a word that no sequence of tokens covers
  size_t max_token_len = 0;   // longest token text in bytes (bounds the match search)
  bool lowercase = true;      // tokenizer.ggml.normalizer.lowercase
  bool strip_accents = true;  // tokenizer.ggml.normalizer.strip_accents: NFD, then marks dropped
};
// llama.cpp's BERT pre-processing: whitespace separates words; NUL, U+FFFD and control characters are dropped;
// punctuation, ASCII symbols and CJK ideographs become one-character words. Returns the words (UTF-8).
std::vector<std::string> wpm_split(std::string_view text, const WpmOptions& options);
// Each word, prefixed with U+2581, is covered left to right by the longest tokens that match; a word with a gap that
// no token covers becomes `unk` as a whole.
void wpm_encode(const TokenTable& table, const WpmOptions& options, std::string_view text, std::vector<TokenId>& out);

// Character data (tokenizer_wpm_unicode.cpp, generated).
namespace wpm_data {
struct LowerRun {
  uint32_t first;
  uint32_t count;
  uint32_t stride;
  int32_t delta;
};
struct NfdRun {
  uint32_t first, last, base;
};
extern const uint32_t kClassRanges[];  // start << 2 | class: 0 other, 1 control, 2 mark, 3 punctuation
extern const size_t kClassRangeCount;
extern const LowerRun kLowerRuns[];
extern const size_t kLowerRunCount;
extern const NfdRun kNfdRuns[];
extern const size_t kNfdRunCount;
}  // namespace wpm_data

}  // namespace greta::model::tok
