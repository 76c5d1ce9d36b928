// Text <-> token ids, agreeing with llama.cpp's tokenizers on every vocabulary GRETA ships tests for.
//   tokenizer.ggml.model = "llama": SentencePiece-style (score-driven merges, byte fallback <0xNN>, "▁" for spaces)
//   tokenizer.ggml.model = "gpt2":  byte-level BPE (ranked merges) after a regex pre-tokenizer chosen by
//                                   tokenizer.ggml.pre (llama-bpe/llama3, qwen2, gpt-2, ...; PCRE2 with Unicode props)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace greta::model {

class GgufFile;
using TokenId = int32_t;

class Tokenizer {
public:
  // Reads tokenizer.ggml.* metadata; throws greta::Error naming an unsupported model or pre-tokenizer.
  static Tokenizer from_gguf(const GgufFile& file);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special: prepend BOS / append EOS as the model's add_bos/add_eos flags say.
  // parse_special: recognise special/control token text (e.g. "<|im_start|>") in `text`.
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special = false) const;
  // Bytes of one token as it appears in the output text (SPM: "▁" -> " ", <0xNN> -> byte; BPE: byte-level decode).
  // Control tokens decode to "" unless `render_special`.
  std::string token_to_piece(TokenId id, bool render_special = false) const;
  std::string decode(const std::vector<TokenId>& ids, bool render_special = false) const;
  // The raw vocabulary string of a token (for --pieces).
  std::string_view token_text(TokenId id) const;

  int32_t vocab_size() const;
  std::string_view kind() const;           // "llama" (SPM) or "gpt2" (BPE)
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
