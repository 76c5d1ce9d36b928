// Tokenizer: vocabulary set-up with llama.cpp's defaults and fix-ups, special-token partitioning, encode and decode.
// The per-algorithm work lives in tokenizer_spm.cpp, tokenizer_bpe.cpp, tokenizer_wpm.cpp and pretokenizer.cpp; reading
// GGUF metadata in
// tokenizer_gguf.cpp.
#include "model/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <unordered_set>

#include "core/error.h"
#include "model/tokenizer_internal.h"

namespace greta::model {

using namespace tok;

struct Tokenizer::Impl {
  bool is_spm = true;
  bool is_wpm = false;  // WordPiece (bert)
  std::string kind_name;  // tokenizer.ggml.model
  std::string pre_name;   // tokenizer.ggml.pre ("default" when absent)
  TokenTable table;
  std::optional<PreTokenizer> pre;  // BPE only
  std::optional<BpeRanks> ranks;    // BPE only
  ByteLevelCodec bytes;
  std::vector<TokenId> specials;  // CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first (stable by id)
  std::unordered_set<TokenId> eog;
  TokenId bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false, clean_spaces = false;
  bool byte_encode = true, escape_spaces = false;  // BPE: GPT-2 byte mapping, or SPM-style raw UTF-8 with U+2581
  BpeWordOptions bpe_options;
  WpmOptions wpm_options;

  // A piece of the input: a special token (token >= 0) or raw text [offset, offset + length).
  struct Fragment {
    TokenId token;
    size_t offset;
    size_t length;
  };
  // Applies llama.cpp's defaults, metadata overrides and text-based fix-ups to the special tokens, in its order.
  void set_up_special_tokens(const TokenizerVocab& v, bool force_add_bos);
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  // Token ids of partitioned text (raw fragments index into `text`).
  std::vector<TokenId> encode_fragments(std::string_view text, const std::vector<Fragment>& fragments,
                                        bool add_special) const;
  std::string piece(TokenId id, bool render_special) const;
  const TokenEntry& entry(TokenId id) const {
    if (id < 0 || id >= table.size()) fail("token id ", id, " is outside the vocabulary (", table.size(), " tokens)");
    return table.entries[static_cast<size_t>(id)];
  }
};

namespace {

// The C locale's isspace, without its undefined behaviour for bytes >= 0x80 (never spaces).
bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

constexpr std::string_view kEscapedSpace = "\xe2\x96\x81";  // U+2581 "▁": SentencePiece's visible space

uint32_t attr_of_type(int32_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

// Token texts llama.cpp recognises when the metadata does not name the token (its llama-vocab.cpp "auto-detect").
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                                          "[EOT]",         "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                          "<end_of_utterance>"};
// Fill-in-the-middle tokens by role (prefix, suffix, middle, pad, repo, file separator): llama.cpp takes the first
// token of each role it finds, marks it control, and lets the last three end generation.
struct FimRole {
  std::array<std::string_view, 8> texts;  // unused slots stay empty
  bool ends_generation;
};
constexpr FimRole kFimRoles[] = {
    {{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
      "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"},
     false},
    {{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
      "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"},
     false},
    {{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
      "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"},
     false},
    {{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}, true},
    {{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}, true},
    {{"<|file_sep|>"}, true},
};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~["};

bool contains_any(std::string_view s, std::initializer_list<std::string_view> needles) {
  for (auto n : needles)
    if (s.find(n) != std::string_view::npos) return true;
  return false;
}

}  // namespace

// ---- construction ---------------------------------------------------------------------------------------------------

Tokenizer Tokenizer::from_vocab(TokenizerVocab v) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  t.kind_name = v.model;
  t.pre_name = v.pre.empty() ? "default" : v.pre;

  bool force_add_bos = false;
  if (v.model == "llama") {
    t.is_spm = true;
    t.bos = 1, t.eos = 2, t.unk = 0;
    t.add_space_prefix = true, t.clean_spaces = false, t.add_bos = true, t.add_eos = false;
  } else if (v.model == "gpt2" || v.model == "gemma4") {
    // gemma4 is BPE with its own pre-tokenizer whatever tokenizer.ggml.pre says, and no default special ids.
    t.is_spm = false;
    if (v.model == "gemma4") {
      t.pre_name = "gemma4";
    } else {
      t.bos = 11, t.eos = 11;
    }
    const PreTokenizerConfig cfg = pre_tokenizer_config(t.pre_name);
    t.pre.emplace(cfg.patterns);
    t.ranks.emplace(v.merges);
    t.add_space_prefix = false, t.clean_spaces = cfg.clean_spaces;
    t.byte_encode = cfg.byte_encode, t.escape_spaces = cfg.escape_spaces;
    t.bpe_options = {cfg.ignore_merges, cfg.newline_runs_whole, !cfg.byte_encode};
    t.add_bos = cfg.add_bos;
    force_add_bos = cfg.force_add_bos;
    if (cfg.no_bos) t.bos = -1;
  } else if (v.model == "bert") {
    // WordPiece: [CLS] 101 / [SEP] 102 / [UNK] 100 by default; tokenizer.ggml.pre is not used.
    t.is_spm = false, t.is_wpm = true;
    t.bos = 101, t.unk = 100, t.sep = 102, t.pad = 0;
    t.add_space_prefix = false, t.clean_spaces = true, t.add_bos = true, t.add_eos = false;
    t.wpm_options.lowercase = v.lowercase.value_or(true);
    t.wpm_options.strip_accents = v.strip_accents.value_or(t.wpm_options.lowercase);
  } else {
    fail("unsupported tokenizer model '", v.model,
         "' (tokenizer.ggml.model; GRETA supports \"llama\", \"gpt2\", \"gemma4\" and \"bert\")");
  }
  if (v.add_space_prefix) t.add_space_prefix = *v.add_space_prefix;

  const size_t n = v.tokens.size();
  if (n == 0) fail("the vocabulary has no tokens (tokenizer.ggml.tokens)");
  if (n > static_cast<size_t>(INT32_MAX)) fail("the vocabulary has too many tokens (", n, ")");
  if (!v.scores.empty() && v.scores.size() < n)
    fail("tokenizer.ggml.scores has ", v.scores.size(), " entries for ", n, " tokens");
  if (!v.token_types.empty() && v.token_types.size() < n)
    fail("tokenizer.ggml.token_type has ", v.token_types.size(), " entries for ", n, " tokens");
  t.table.entries.resize(n);
  t.table.ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenEntry& e = t.table.entries[i];
    e.text = std::move(v.tokens[i]);
    if (e.text.empty()) e.text = cat("[EMPTY_", i, "]");  // as llama.cpp renames them
    e.score = v.scores.empty() ? 0.f : v.scores[i];
    e.attr = v.token_types.empty() ? kAttrNormal : attr_of_type(v.token_types[i]);
    auto [it, inserted] = t.table.ids.try_emplace(e.text, static_cast<TokenId>(i));
    if (!inserted) fail("duplicate token in the vocabulary: ids ", it->second, " and ", i, " have the same text");
    t.wpm_options.max_token_len = std::max(t.wpm_options.max_token_len, e.text.size());
  }
  t.set_up_special_tokens(v, force_add_bos);
  t.wpm_options.unk = t.unk;
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::set_up_special_tokens(const TokenizerVocab& v, bool force_add_bos) {
  Impl& t = *this;
  const TokenId n = t.table.size();
  auto in_range = [&](TokenId id) { return id >= 0 && id < n; };
  // Defaults outside the vocabulary are disabled; metadata ids outside it keep the default (llama.cpp warns).
  auto resolve = [&](TokenId& id, const std::optional<int64_t>& meta) {
    if (!in_range(id)) id = -1;
    if (meta && *meta >= 0 && *meta < n) id = static_cast<TokenId>(*meta);
  };
  resolve(t.bos, v.bos), resolve(t.eos, v.eos), resolve(t.eot, v.eot), resolve(t.eom, v.eom);
  resolve(t.unk, v.unk), resolve(t.sep, v.sep), resolve(t.pad, v.pad);
  if (v.add_bos) t.add_bos = *v.add_bos;
  if (v.add_eos) t.add_eos = *v.add_eos;
  if (force_add_bos) t.add_bos = true;  // llama.cpp overrides add_bos_token = false for gemma4
  if (t.add_bos && t.bos < 0) fail("tokenizer.ggml.add_bos_token is true, but the vocabulary has no BOS token");
  if (t.add_eos && t.eos < 0) fail("tokenizer.ggml.add_eos_token is true, but the vocabulary has no EOS token");

  auto mark_control = [&](TokenId id) { t.table.entries[id].attr |= kAttrControl; };
  // EOT / EOM / FIM tokens named only by their text become control tokens. (llama.cpp walks a hash map, so which of
  // several EOT candidates wins is unspecified there; here the first in kEotTexts does.)
  if (t.eot < 0) {
    for (auto text : kEotTexts)
      if (TokenId id = t.table.find(text); id >= 0) {
        t.eot = id;
        mark_control(id);
        break;
      }
  }
  if (t.eom < 0) {
    if (TokenId id = t.table.find("<|eom_id|>"); id >= 0) t.eom = id, mark_control(id);
  }
  for (const FimRole& role : kFimRoles) {
    for (auto text : role.texts) {
      const TokenId id = text.empty() ? -1 : t.table.find(text);
      if (id < 0) continue;
      mark_control(id);
      if (role.ends_generation) t.eog.insert(id);
      break;
    }
  }
  for (TokenEntry& e : t.table.entries)  // control tokens named "unused" are unused
    if ((e.attr & kAttrControl) && e.text.find("unused") != std::string::npos) e.attr |= kAttrUnused;
  for (auto text : kEogTexts)
    if (TokenId id = t.table.find(text); id >= 0) mark_control(id), t.eog.insert(id);
  for (auto text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})  // gpt-oss: always rendered
    if (TokenId id = t.table.find(text); id >= 0) t.table.entries[id].attr = kAttrUserDefined;
  for (TokenId id : {t.eos, t.eot, t.eom})
    if (id >= 0) t.eog.insert(id);
  // Harmony-style vocabularies: "<|end|>" ends a message, not the generation.
  auto in_eog = [&](std::string_view text) {
    TokenId id = t.table.find(text);
    return id >= 0 && t.eog.count(id) ? id : -1;
  };
  const TokenId end_id = in_eog("<|end|>");
  if (end_id >= 0 && ((in_eog("<|return|>") >= 0 && in_eog("<|call|>") >= 0) ||
                      ((in_eog("<|call|>") >= 0 || in_eog("<|calls|>") >= 0) && in_eog("<|flush|>") >= 0))) {
    t.eog.erase(end_id);
    t.table.entries[end_id].attr = kAttrUserDefined;
  }
  if (TokenId s_id = in_eog("</s>"); s_id >= 0 && in_eog("<|tool_response>") >= 0) {
    t.eog.erase(s_id);
    t.table.entries[s_id].attr = kAttrNormal;
  }

  for (TokenId id = 0; id < n; ++id)
    if (t.table.entries[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) t.specials.push_back(id);
  std::stable_sort(t.specials.begin(), t.specials.end(), [&](TokenId a, TokenId b) {
    return t.table.entries[a].text.size() > t.table.entries[b].text.size();
  });

  // Per-model whitespace stripping around special tokens (llama.cpp keys these off names).
  std::string name = v.model_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  auto set_attr = [&](std::string_view text, uint32_t attr, bool on) {
    if (TokenId id = t.table.find(text); id >= 0) {
      uint32_t& a = t.table.entries[id].attr;
      a = on ? (a | attr) : (a & ~attr);
    }
  };
  if (contains_any(v.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"})) {
    set_attr("<mask>", kAttrLStrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (TokenId id : t.specials) t.table.entries[id].attr |= kAttrRStrip;
    set_attr("</s>", kAttrRStrip, true);
    for (auto text : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(text, kAttrRStrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set_attr("[MASK]", kAttrLStrip, true);
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// ---- encode ---------------------------------------------------------------------------------------------------------

// Splits the text around special-token strings, longest tokens first, as llama.cpp's tokenizer_st_partition does.
// Without parse_special only user-defined tokens are split out (control and unknown ones stay plain text).
std::vector<Tokenizer::Impl::Fragment> Tokenizer::Impl::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (TokenId id : specials) {
    const TokenEntry& special = table.entries[id];
    if (!parse_special && (special.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = special.text;
    if (text.find(needle) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset, length = f.length;
      while (true) {
        const size_t match = text.substr(0, base + length).find(needle, base);
        if (match == std::string_view::npos) {
          if (length > 0) next.push_back({-1, base, length});
          break;
        }
        size_t left_length = match - base;
        if (special.attr & kAttrLStrip)
          while (left_length > 0 && is_ascii_space(text[base + left_length - 1])) --left_length;
        if (left_length > 0) next.push_back({-1, base, left_length});
        next.push_back({id, 0, 0});
        const size_t end = match + needle.size();
        if (end >= base + length) break;
        size_t right = end, right_length = base + length - end;
        if (special.attr & kAttrRStrip)
          while (right_length > 0 && is_ascii_space(text[right])) ++right, --right_length;
        base = right, length = right_length;
        if (length == 0) break;
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->encode_fragments(text, impl_->partition(text, parse_special), add_special);
}

std::vector<TokenId> Tokenizer::encode_segments(const std::vector<Segment>& segments, bool add_special) const {
  std::string text;
  for (const Segment& s : segments) text.append(s.text);
  // Each segment is partitioned on its own; raw fragments that touch across a boundary are joined again so that the
  // text is tokenized exactly as if it had been one string.
  std::vector<Impl::Fragment> fragments;
  size_t base = 0;
  for (const Segment& s : segments) {
    for (Impl::Fragment f : impl_->partition(s.text, s.parse_special)) {
      if (f.token < 0) {
        f.offset += base;
        if (!fragments.empty() && fragments.back().token < 0 &&
            fragments.back().offset + fragments.back().length == f.offset) {
          fragments.back().length += f.length;
          continue;
        }
      }
      fragments.push_back(f);
    }
    base += s.text.size();
  }
  return impl_->encode_fragments(text, fragments, add_special);
}

std::vector<TokenId> Tokenizer::Impl::encode_fragments(std::string_view text, const std::vector<Fragment>& fragments,
                                                       bool add_special) const {
  const Impl& t = *this;
  std::vector<TokenId> out;
  if (t.is_wpm) {
    // llama.cpp adds [CLS] and [SEP] whenever special tokens are asked for, whatever add_bos / add_eos say.
    if (add_special && t.bos >= 0) out.push_back(t.bos);
    for (const auto& f : fragments) {
      if (f.token >= 0)
        out.push_back(f.token);
      else
        wpm_encode(t.table, t.wpm_options, text.substr(f.offset, f.length), out);
    }
    if (add_special && t.sep >= 0) out.push_back(t.sep);
    return out;
  }
  if (add_special && t.add_bos) out.push_back(t.bos);
  if (t.is_spm) {
    // A space is prepended to the text at the start and after every special token (add_space_prefix).
    bool after_special = true;
    for (const auto& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      std::string piece = t.add_space_prefix && after_special ? " " : "";
      piece.append(text.substr(f.offset, f.length));
      replace_all(piece, " ", kEscapedSpace);
      spm_encode(t.table, t.unk, piece, out);
      after_special = false;
    }
  } else {
    for (const auto& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      std::string raw(text.substr(f.offset, f.length));
      if (t.escape_spaces) replace_all(raw, " ", kEscapedSpace);
      for (const std::string& word : t.pre->split(raw))
        bpe_encode_word(t.table, *t.ranks, t.bpe_options, t.byte_encode ? t.bytes.encode(word) : word, out);
    }
  }
  if (add_special && t.add_eos) out.push_back(t.eos);
  return out;
}

// ---- decode ---------------------------------------------------------------------------------------------------------

std::string Tokenizer::Impl::piece(TokenId id, bool render_special) const {
  const TokenEntry& e = entry(id);
  if (!render_special && (e.attr & (kAttrUnknown | kAttrControl))) return {};
  if (e.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return e.text;
  if (e.attr & kAttrNormal) {
    if (!is_spm && !is_wpm && !escape_spaces) return bytes.decode(e.text);
    std::string s = e.text;
    replace_all(s, kEscapedSpace, " ");
    return s;
  }
  if (e.attr & kAttrByte) {  // "<0xNN>": llama.cpp reads the two characters after "<0x" as hex
    const std::string digits = e.text.size() > 3 ? e.text.substr(3, 2) : std::string();
    return std::string(1, static_cast<char>(std::strtol(digits.c_str(), nullptr, 16)));
  }
  return {};  // unused / undefined tokens render as nothing
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  return impl_->piece(id, render_special);
}

namespace {

// llama.cpp's clean_up_tokenization_spaces (BPE vocabularies whose pre-tokenizer asks for it): drops the space before
// ? ! . , , around a lone apostrophe, and before 's 'm 're 've.
void clean_up_spaces(std::string& text) {
  if (text.empty()) return;
  std::string src = text, dst;
  dst.reserve(src.size());
  // pass 1: " ?", " !", " .", " ,"
  dst.push_back(src[0]);
  for (size_t i = 1; i < src.size(); ++i) {
    const char x = src[i];
    if (src[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) dst.pop_back();
    dst.push_back(x);
  }
  // pass 2: " ' " -> "'"
  src.swap(dst);
  dst.clear();
  dst.push_back(src[0]);
  for (size_t i = 1; i < src.size(); ++i) {
    const char x = src[i];
    if (x == '\'' && i + 1 < src.size() && src[i - 1] == ' ' && src[i + 1] == ' ') {
      dst.pop_back();
      src[++i] = '\0';  // the next space is skipped and no longer counts as a space for the character after it
    }
    dst.push_back(x);
  }
  // pass 3: " 's", " 'm", " 're", " 've" lose their space (" 't", " 'd", " 'll" keep it)
  src.swap(dst);
  dst.clear();
  dst.push_back(src[0]);
  for (size_t i = 1; i < src.size(); ++i) {
    const char x = src[i];
    if (src[i - 1] == ' ' && x == '\'' && i + 1 < src.size()) {
      const char x1 = src[i + 1];
      const char x2 = i + 2 < src.size() ? src[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) dst.pop_back();
    }
    dst.push_back(x);
  }
  text.swap(dst);
}

}  // namespace

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool render_special) const {
  const Impl& t = *impl_;
  std::string out;
  // The space add_space_prefix put before the text is dropped from the first token's piece (whatever that token is,
  // as llama.cpp's llama_detokenize with remove_special = false does).
  bool strip_leading_space = t.add_space_prefix;
  for (TokenId id : ids) {
    std::string p = t.piece(id, render_special);
    if (strip_leading_space && !p.empty() && p[0] == ' ') p.erase(0, 1);
    strip_leading_space = false;
    out += p;
  }
  if (t.clean_spaces) clean_up_spaces(out);
  return out;
}

// ---- queries --------------------------------------------------------------------------------------------------------

std::string_view Tokenizer::token_text(TokenId id) const { return impl_->entry(id).text; }
int32_t Tokenizer::vocab_size() const { return impl_->table.size(); }
std::string_view Tokenizer::kind() const { return impl_->kind_name; }
std::string_view Tokenizer::pre_tokenizer() const { return impl_->pre_name; }
TokenId Tokenizer::bos() const { return impl_->bos; }
TokenId Tokenizer::eos() const { return impl_->eos; }
TokenId Tokenizer::eot() const { return impl_->eot; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::is_end_of_generation(TokenId id) const { return id >= 0 && impl_->eog.count(id) > 0; }
bool Tokenizer::is_control(TokenId id) const {
  return id >= 0 && id < impl_->table.size() && (impl_->table.entries[id].attr & kAttrControl);
}

}  // namespace greta::model
