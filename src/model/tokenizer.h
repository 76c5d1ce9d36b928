// Text <-> token ids, agreeing with llama.cpp's tokenizers on every vocabulary GRETA ships tests for.
//   tokenizer.ggml.model = "llama": SentencePiece-style (score-driven merges, byte fallback <0xNN>, "▁" for spaces)
//   tokenizer.ggml.model = "gpt2":  byte-level BPE (ranked merges) after a regex pre-tokenizer chosen by
//                                   tokenizer.ggml.pre (every name llama.cpp accepts: llama-bpe, qwen2, qwen35,
//                                   deepseek-llm, deepseek-coder, command-r, ...; PCRE2 with Unicode properties)
//   tokenizer.ggml.model = "gemma4": SPM-style BPE: spaces as "▁", ranked merges over raw UTF-8 between newline runs,
//                                   byte fallback to <0xNN>
//   tokenizer.ggml.model = "bert":  WordPiece: BERT normalization (lowercase, accents stripped), words split at
//                                   whitespace and punctuation, greedy longest-match subwords ("▁" marks word starts)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace greta::model {

class GgufFile;
using TokenId = int32_t;

// Everything from_gguf reads from tokenizer.ggml.* (plus general.name), as plain data: tests, fuzzers and
// synthetic vocabularies build tokenizers from it without a file. Absent optionals take llama.cpp's defaults.
struct TokenizerVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" (SPM), "gpt2" (BPE), "gemma4" or "bert" (WPM)
  std::string pre;                   // tokenizer.ggml.pre; empty = absent ("default")
  std::string model_name;            // general.name (llama.cpp keys a few per-model token attributes off it)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores (SPM merge priorities); empty = all 0
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
                                     // 5 unused, 6 byte); empty = all normal
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right" in rank order (BPE only)
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad;  // *_token_id; out-of-range ids keep the default
  std::optional<bool> add_bos, add_eos, add_space_prefix;    // add_bos_token / add_eos_token / add_space_prefix
  std::optional<bool> lowercase, strip_accents;  // tokenizer.ggml.normalizer.* (bert); strip_accents defaults to lowercase
};

class Tokenizer {
public:
  // Reads tokenizer.ggml.* metadata; throws greta::Error naming an unsupported model or pre-tokenizer.
  static Tokenizer from_gguf(const GgufFile& file);
  // The same from plain data; throws greta::Error on an inconsistent vocabulary (duplicate tokens, bad sizes).
  static Tokenizer from_vocab(TokenizerVocab vocab);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special: prepend BOS / append EOS as the model's add_bos/add_eos flags say (bert: [CLS] ... [SEP] always,
  // as llama.cpp does).
  // parse_special: recognise special/control token text (e.g. "<|im_start|>") in `text`. User-defined tokens are
  // recognised either way (as in llama.cpp). Any byte string is accepted: invalid UTF-8 goes through SPM's byte
  // fallback, and becomes U+FFFD before BPE's pre-tokenizer.
  // Ids throw greta::Error when out of range in every function below that takes one (is_* just answer false).
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special = false) const;
  // The same for a text given in segments that differ in whether special-token text is recognised (a chat template's
  // markup: yes; the user's message inside it: no). The segments are tokenized as their concatenation would be:
  // raw text is not split at segment boundaries, so encode_segments({{t, p}}) == encode(t, add_special, p).
  struct Segment {
    std::string_view text;
    bool parse_special = false;
  };
  std::vector<TokenId> encode_segments(const std::vector<Segment>& segments, bool add_special) const;
  // Bytes of one token as it appears in the output text (SPM: "▁" -> " ", <0xNN> -> byte; BPE: byte-level decode).
  // Control tokens decode to "" unless `render_special`.
  std::string token_to_piece(TokenId id, bool render_special = false) const;
  // llama.cpp's llama_detokenize(remove_special = false): the pieces joined; with SPM's add_space_prefix the first
  // token's leading space is dropped (even when the first token is a BOS that renders as "", so drop the BOS first to
  // get the text back); BPE pre-tokenizers that ask for it clean up spaces before punctuation (" ," -> ",").
  // decode(encode(s, false)) == s for valid UTF-8 s, except SPM text containing "▁" and those clean-ups; bert gives
  // the normalized words back, each after a space (" hello, world" for "Hello, World").
  std::string decode(const std::vector<TokenId>& ids, bool render_special = false) const;
  // The raw vocabulary string of a token (for --pieces).
  std::string_view token_text(TokenId id) const;

  int32_t vocab_size() const;
  std::string_view kind() const;           // "llama" (SPM), "gpt2" (BPE), "gemma4" (SPM-style BPE), "bert" (WPM)
  std::string_view pre_tokenizer() const;  // tokenizer.ggml.pre, "default" when absent
  TokenId bos() const;                     // -1 when the model has none
  TokenId eos() const;
  TokenId eot() const;                     // end-of-turn (e.g. <|eot_id|>, <|im_end|>), -1 when none
  bool add_bos() const;
  bool add_eos() const;
  bool is_end_of_generation(TokenId id) const;  // EOS, EOT or another token marked end-of-generation
  bool is_control(TokenId id) const;

private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace greta::model
