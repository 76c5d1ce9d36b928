// The pre-tokenizer table: every tokenizer.ggml.pre name llama.cpp's vocabulary loader accepts, the split patterns of
// the pre-tokenizer type it selects, and the flags that come with the name.
//
// llama.cpp runs each of its patterns one of three ways (unicode.cpp), and the PCRE2 (UTF + UCP) patterns below are
// written so that PCRE2 splits exactly as that way does:
//  - hand-written matchers for a few well-known patterns (GPT-2, Llama-3, Qwen2, Qwen3.5, Kimi-K2, digit grouping,
//    newline runs). These behave like the regex they stand for, with two exceptions written out below: Kimi-K2's list
//    holds only "\p{Han}+", which selects a matcher for its whole tokenizer.json pattern (letter runs without Han,
//    no marks), and the digit grouping glues the text before a number to its first group ("ab12345" -> "ab12", "345").
//  - std::regex over a "collapsed" text, for patterns that use \p{..}: every non-ASCII code point becomes one byte
//    standing for its category, so \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all mean "any letter" there; below they are
//    written as \p{L}.
//  - std::wregex for the other patterns: non-ASCII whitespace is turned into \v before matching, so a literal range
//    that spans whitespace code points (U+0800-U+4E00 in the DeepSeek patterns, U+3000 in DeepSeek-LLM's punctuation
//    class) does not match them; below those ranges leave them out. \d is ASCII-only there, written [0-9].
// "(?i:...)" contractions are spelled out as ASCII classes: PCRE2's caseless Unicode matching would also fold U+017F
// and U+212A, which llama.cpp's matchers do not.
#include "core/error.h"
#include "model/tokenizer_internal.h"

namespace greta::model::tok {

namespace {

#define GRETA_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
// Shared tail: whitespace ending in newlines, whitespace not followed by a word, other whitespace.
#define GRETA_WS_TAIL R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"

constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)" GRETA_WS_TAIL;
// Qwen2: as Llama-3 but digits one at a time.
constexpr const char* kQwen2 =
    GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)" GRETA_WS_TAIL;
// Qwen3.5: letter runs take combining marks too.
constexpr const char* kQwen35 =
    GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*)" GRETA_WS_TAIL;
// Jais-2: Llama-3 with whitespace runs cut into power-of-two lengths.
constexpr const char* kJais2 =
    GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S))"
    R"(|\s{1,2}(?!\S)|\s{1})";
constexpr const char* kPoro = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
constexpr const char* kNewlineRuns = R"([^\n]+|\n+)";

// DeepSeek-LLM: the letters of cased scripts (its tokenizer.json's literal class).
constexpr const char* kDeepseekLetters =
    R"(\s?[\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD})"
    R"(\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15})"
    R"(\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB})"
    R"(\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D})"
    R"(\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
    R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})"
    R"(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
    R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
// ASCII punctuation and symbols (':'..'~' spans the letters too, which earlier patterns took already), their
// full-width forms, quotation marks, and U+3001-U+3002 (the class's U+3000 is whitespace, see the file comment).
constexpr const char* kDeepseekPunct = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3001}-\x{3002}]+)";
// CJK, Hangul and everything from U+0800 to U+4E00 except whitespace.
constexpr const char* kDeepseekCjk =
    R"([\x{800}-\x{167F}\x{1681}-\x{1FFF}\x{200B}-\x{2027}\x{202A}-\x{202E}\x{2030}-\x{205E}\x{2060}-\x{2FFF})"
    R"(\x{3001}-\x{9FA5}\x{AC00}-\x{D7FF}]+)";
// DeepSeek-V3 and relatives: CJK ideographs and kana, then words with ASCII-punctuation prefixes.
constexpr const char* kHanKana = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
#define GRETA_DEEPSEEK3_HEAD                                                                                 \
  R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+)"
constexpr const char* kDeepseek3 = GRETA_DEEPSEEK3_HEAD R"([\r\n]*)" GRETA_WS_TAIL;
constexpr const char* kSpark25 = GRETA_DEEPSEEK3_HEAD R"(|[\r\n]|\s+(?!\S)|\s+)";
// GPT-4o style (upper-then-lower letter runs; llama.cpp's matching makes every letter both, see the file comment).
#define GRETA_GPT4O_WORDS R"([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+)" GRETA_CONTRACTIONS "?"
constexpr const char* kYoutuCjk =
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B})"
    R"(\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kYoutu = GRETA_GPT4O_WORDS R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" GRETA_WS_TAIL;
constexpr const char* kTinyAya = GRETA_GPT4O_WORDS R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" GRETA_WS_TAIL;
// Tekken / GPT-4o as llama.cpp rewrites them: lookaheads instead of the cased letter classes.
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)"
    R"(|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" GRETA_WS_TAIL;
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)" GRETA_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)" GRETA_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" GRETA_WS_TAIL;
constexpr const char* kGraniteMulti =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+)" GRETA_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*)" GRETA_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*)" GRETA_WS_TAIL;
// llama.cpp's digit grouping (AFMoE, tiny_aya): groups of three from the right, the first group carrying the text
// before the number.
constexpr const char* kDigitGroups = R"(\P{N}*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";
// Kimi-K2: Han runs; non-Han letter runs with an optional lead character and contraction; 1-3 digits; the rest.
#define GRETA_HAN                                                                                           \
  R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F})"          \
  R"(\x{2B820}-\x{2CEAF}\x{2CEB0}-\x{2EBEF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])"
constexpr const char* kKimiK2 = GRETA_HAN R"(+|[^\r\n\p{L}\p{N}]?(?:(?!)" GRETA_HAN R"()\p{L})+)" GRETA_CONTRACTIONS
                                          R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)" GRETA_WS_TAIL;
// AFMoE: CJK and other scripts without spaces. The class as llama.cpp has it starts one range at U+8C48 (not the
// compatibility U+F900), so it spans Hangul, surrogates and private use as well.
constexpr const char* kAfmoeCjk =
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{8C48}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F})"
    R"(\x{2F00}-\x{2FDF}\x{0E40}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F})"
    R"(\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)";

enum class PreKind {
  Default, Llama3, Jais2, DeepseekLlm, Deepseek3, Spark25, Youtu, DeepseekCoder, Falcon, Starcoder, Gpt2, Qwen2,
  Qwen35, Poro, Viking, Tekken, Chameleon, Gpt4o, GraniteMulti, TinyAya, KimiK2, SuperBpe, BailingMoe, SeedCoder,
  Ufakzeka, Afmoe, Laguna, ExaoneMoe, Gemma4, SarvamMoe, MiniCpm5, Whitespace,
};

std::vector<std::string> patterns_for(PreKind kind) {
  switch (kind) {
    case PreKind::Default: return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
    case PreKind::Llama3: return {kLlama3};
    case PreKind::Jais2: return {kJais2};
    // "\s+$": $ is the end of the piece only (std::regex has no "before a final newline").
    case PreKind::DeepseekLlm:
      return {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+\z)", kDeepseekCjk, R"(\p{N}+)"};
    case PreKind::Deepseek3: return {R"(\p{N}{1,3})", kHanKana, kDeepseek3};
    case PreKind::Spark25: return {R"(\p{N}{1,3})", kHanKana, kSpark25, R"(\p{N})"};
    case PreKind::Youtu: return {kYoutuCjk, kYoutu};
    case PreKind::DeepseekCoder: return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"};
    case PreKind::Falcon: return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    case PreKind::Starcoder: return {R"(\p{N})", kGpt2};
    case PreKind::Gpt2: return {kGpt2};
    case PreKind::Qwen2: return {kQwen2};
    case PreKind::Qwen35: return {kQwen35};
    case PreKind::Poro: return {kPoro};
    case PreKind::Viking: return {kPoro, R"(\p{N})"};
    case PreKind::Tekken: return {kTekken};
    case PreKind::Chameleon:
      return {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", R"(\p{N})",
              R"([\p{P}!-/:-@\[-`{-~])", kGpt2};
    case PreKind::Gpt4o: return {kGpt4o};
    case PreKind::GraniteMulti: return {kGraniteMulti};
    case PreKind::TinyAya: return {kDigitGroups, kTinyAya};
    case PreKind::KimiK2: return {kKimiK2};
    // The second pattern only ever matches empty: it cuts digit runs into threes from the right.
    case PreKind::SuperBpe: return {R"(\p{N}+)", R"((?=(?:[0-9]{3})+(?![0-9])))"};
    case PreKind::BailingMoe:
      return {R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
              R"(|\s*[\r\n]|\s+(?!\S)|\s+)"};
    case PreKind::SeedCoder:
      return {GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+)" GRETA_WS_TAIL};
    case PreKind::Ufakzeka: return {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)" GRETA_WS_TAIL};
    case PreKind::Afmoe: return {kDigitGroups, kAfmoeCjk, kDeepseek3};
    case PreKind::Laguna: return {kNewlineRuns, kQwen2};
    case PreKind::ExaoneMoe:
      return {GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N})"
                                 R"(| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"};
    case PreKind::Gemma4:
    case PreKind::SarvamMoe: return {kNewlineRuns};
    case PreKind::MiniCpm5:
      return {R"(\p{N}{1,3})",
              GRETA_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*)" GRETA_WS_TAIL};
    case PreKind::Whitespace: return {R"(\S+)"};
  }
  return {};
}

// Flags, as llama.cpp's loader sets them per name (BPE defaults: clean_spaces on, everything else off).
enum PreFlag : unsigned {
  kNoClean = 1u << 0,        // clean_spaces off
  kIgnoreMerges = 1u << 1,   // a word that is a token is emitted whole
  kAddBos = 1u << 2,         // add_bos_token defaults to true
  kNoBos = 1u << 3,          // no BOS token at all
  kEscapeSpaces = 1u << 4,   // SPM-style BPE: spaces -> U+2581, words stay raw UTF-8 (<0xNN> byte fallback)
  kRawWords = 1u << 5,       // words stay raw UTF-8 without escaping spaces
  kGemma4 = 1u << 6,         // newline-run words that are tokens are kept whole; BOS is always added
};

struct PreName {
  const char* name;
  PreKind kind;
  unsigned flags;
};

constexpr PreName kPreNames[] = {
    {"default", PreKind::Default, 0},
    {"minicpm5", PreKind::MiniCpm5, kIgnoreMerges},
    {"llama3", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"llama-v3", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"llama-bpe", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"falcon3", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"falcon-h1", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"pixtral", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"midm-2.0", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"lfm2", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"jina-v5-nano", PreKind::Llama3, kIgnoreMerges | kAddBos},
    {"deepseek-llm", PreKind::DeepseekLlm, kNoClean},
    {"deepseek-coder", PreKind::DeepseekCoder, kNoClean},
    {"deepseek-v3", PreKind::Deepseek3, kNoClean},
    {"spark2_5", PreKind::Spark25, kNoClean},
    {"youtu", PreKind::Youtu, kNoClean | kIgnoreMerges},
    {"falcon", PreKind::Falcon, 0},
    {"mpt", PreKind::Gpt2, 0},
    {"starcoder", PreKind::Starcoder, 0},
    {"gpt-2", PreKind::Gpt2, 0},
    {"phi-2", PreKind::Gpt2, 0},
    {"jina-es", PreKind::Gpt2, 0},
    {"jina-de", PreKind::Gpt2, 0},
    {"gigachat", PreKind::Gpt2, 0},
    {"jina-v2-es", PreKind::Gpt2, 0},
    {"jina-v2-de", PreKind::Gpt2, 0},
    {"a.x-4.0", PreKind::Gpt2, 0},
    {"mellum", PreKind::Gpt2, 0},
    {"modern-bert", PreKind::Gpt2, 0},
    {"jais-2", PreKind::Jais2, 0},
    {"gemma4", PreKind::Gemma4, kEscapeSpaces | kGemma4},
    {"granite-embed-multi-311m", PreKind::Gemma4, kEscapeSpaces | kGemma4},
    {"sarvam-moe", PreKind::SarvamMoe, kEscapeSpaces | kNoClean},
    {"jina-v1-en", PreKind::Gpt2, 0},  // these three also add a separator token in llama.cpp's embedding tools
    {"jina-v2-code", PreKind::Gpt2, 0},
    {"roberta-bpe", PreKind::Gpt2, 0},
    {"whitespace", PreKind::Whitespace, kRawWords},
    {"refact", PreKind::Starcoder, 0},
    {"command-r", PreKind::Starcoder, kNoClean},
    {"qwen2", PreKind::Qwen2, kNoClean},
    {"deepseek-r1-qwen", PreKind::Qwen2, kNoClean},
    {"kormo", PreKind::Qwen2, kNoClean},
    {"f2llmv2", PreKind::Qwen2, kNoClean},
    {"qwen35", PreKind::Qwen35, kNoClean},
    {"stablelm2", PreKind::Qwen2, 0},
    {"olmo", PreKind::Gpt2, 0},
    {"dbrx", PreKind::Llama3, 0},
    {"smaug-bpe", PreKind::Llama3, 0},
    {"poro-chat", PreKind::Poro, kNoClean},
    {"glm4", PreKind::Llama3, kNoBos},
    {"chatglm-bpe", PreKind::Llama3, kNoBos},
    {"viking", PreKind::Viking, kNoClean},
    {"jais", PreKind::Gpt2, 0},
    {"tekken", PreKind::Tekken, kNoClean | kIgnoreMerges | kAddBos},
    {"smollm", PreKind::Starcoder, kNoClean},
    {"codeshell", PreKind::Starcoder, 0},
    {"bloom", PreKind::Poro, 0},
    {"gpt3-finnish", PreKind::Poro, 0},
    {"exaone", PreKind::Starcoder, 0},
    {"exaone4", PreKind::Gpt2, 0},
    {"exaone-moe", PreKind::ExaoneMoe, 0},
    {"chameleon", PreKind::Chameleon, kAddBos | kNoClean},
    {"minerva-7b", PreKind::Starcoder, 0},
    {"megrez", PreKind::Qwen2, 0},
    {"gpt-4o", PreKind::Gpt4o, kNoClean},
    {"llama4", PreKind::Gpt4o, kNoClean},
    {"kanana2", PreKind::Gpt4o, kNoClean},
    {"talkie", PreKind::Gpt4o, kNoClean},
    {"granite-embed-multi-97m", PreKind::GraniteMulti, kNoClean | kIgnoreMerges},
    {"tiny_aya", PreKind::TinyAya, kNoClean},
    {"cohere2moe", PreKind::TinyAya, kNoClean},
    {"superbpe", PreKind::SuperBpe, kNoClean},
    {"trillion", PreKind::Gpt2, kNoClean},
    {"granite-docling", PreKind::Gpt2, kNoClean},
    {"bailingmoe", PreKind::BailingMoe, kNoClean},
    {"bailingmoe2", PreKind::BailingMoe, kNoClean},
    {"llada-moe", PreKind::BailingMoe, kNoClean},
    {"seed-coder", PreKind::SeedCoder, kNoClean},
    {"hunyuan", PreKind::Qwen2, kNoClean},
    {"hunyuan-dense", PreKind::Deepseek3, kNoClean},
    {"hy_v4", PreKind::Deepseek3, kNoClean},
    {"joyai-llm", PreKind::Deepseek3, kNoClean},
    {"kimi-k2", PreKind::KimiK2, kNoClean},  // may come without merges (tokenizer_gguf.cpp)
    {"ufakzeka", PreKind::Ufakzeka, kNoClean},
    {"grok-2", PreKind::Qwen2, kNoClean},
    {"afmoe", PreKind::Afmoe, kNoClean},
    {"laguna", PreKind::Laguna, kNoClean},
    {"minimax-m2", PreKind::Gpt4o, kNoClean},
    {"solar-open", PreKind::Qwen2, kNoClean},
    {"mellum2", PreKind::Starcoder, 0},
};

#undef GRETA_CONTRACTIONS
#undef GRETA_WS_TAIL
#undef GRETA_DEEPSEEK3_HEAD
#undef GRETA_GPT4O_WORDS
#undef GRETA_HAN

}  // namespace

PreTokenizerConfig pre_tokenizer_config(std::string_view pre_name) {
  if (pre_name.empty()) pre_name = "default";  // llama.cpp warns and uses the default split
  for (const PreName& p : kPreNames) {
    if (pre_name != p.name) continue;
    PreTokenizerConfig cfg;
    cfg.patterns = patterns_for(p.kind);
    cfg.clean_spaces = !(p.flags & kNoClean);
    cfg.ignore_merges = p.flags & kIgnoreMerges;
    cfg.add_bos = p.flags & kAddBos;
    cfg.no_bos = p.flags & kNoBos;
    cfg.escape_spaces = p.flags & kEscapeSpaces;
    cfg.byte_encode = !(p.flags & (kEscapeSpaces | kRawWords));
    cfg.newline_runs_whole = p.flags & kGemma4;
    cfg.force_add_bos = p.flags & kGemma4;
    return cfg;
  }
  fail("unsupported pre-tokenizer '", pre_name, "' (tokenizer.ggml.pre)");
}

std::vector<std::string_view> pre_tokenizer_names() {
  std::vector<std::string_view> names;
  for (const PreName& p : kPreNames) names.emplace_back(p.name);
  return names;
}

}  // namespace greta::model::tok
