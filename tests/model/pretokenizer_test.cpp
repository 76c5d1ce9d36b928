// Pre-tokenizers: word splits of llama.cpp's pre-tokenizer types, derived by hand from their regexes (the
// vocabularies' test vectors in tokenizer_test.cpp check them end to end).
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/tokenizer_internal.h"

using namespace greta;
using namespace greta::model;

namespace {

std::string utf8(std::initializer_list<uint32_t> cpts) {
  std::string s;
  for (uint32_t c : cpts) tok::append_utf8(s, c);
  return s;
}

}  // namespace

// ---- pre-tokenizer splits, derived by hand from the regexes ----------------------------------------------------------

TEST_CASE("tokenizer: pre-tokenizer word splits") {
  auto split = [](std::string_view pre, std::string_view text) {
    return tok::PreTokenizer(tok::pre_tokenizer_config(pre).patterns).split(text);
  };
  using Words = std::vector<std::string>;
  // Llama 3: a space stays with the following letters; of a run of spaces before a word only the last joins it
  // ("\s+(?!\S)"); newline runs absorb the whitespace before them; digits in threes; contractions any case.
  CHECK(split("llama-bpe", "Hello  world\n\n  x 123456 I'M ok!!\n") ==
        Words{"Hello", " ", " world", "\n\n", " ", " x", " ", "123", "456", " I", "'M", " ok", "!!\n"});
  // GPT-2: lowercase contractions only; text no alternative matches ("\t" before a letter) is a word of its own.
  CHECK(split("gpt-2", "Hello  world\n\n  x 123456 I'M") ==
        Words{"Hello", " ", " world", "\n\n ", " x", " 123456", " I", "'", "M"});
  CHECK(split("gpt-2", "a\tb it's") == Words{"a", "\t", "b", " it", "'s"});
  // Qwen2: single digits.
  CHECK(split("qwen2", "x 2024ab") == Words{"x", " ", "2", "0", "2", "4", "ab"});
  // The default split applies four patterns one after the other, each inside the pieces of the one before.
  CHECK(split("default", "Hello, world! 12345") == Words{"Hello", ",", " world", "!", " ", "123", "45"});
  // Unicode classes as llama.cpp's tables have them: U+0085 is whitespace, U+180E is not (PCRE2 disagrees on the
  // latter), U+3000 is whitespace, CJK ideographs are letters, U+0661 (Arabic-Indic one) is a digit.
  CHECK(split("gpt-2", utf8({'a', 0x85, 0x85, 'b'})) == Words{"a", utf8({0x85}), utf8({0x85}), "b"});
  CHECK(split("gpt-2", utf8({'a', 0x180E, 0x180E, 'b'})) == Words{"a", utf8({0x180E, 0x180E}), "b"});
  CHECK(split("llama-bpe", utf8({0x4E2D, 0x6587, 0x3000, 0x3000, 'x', 0x661, 0x662})) ==
        Words{utf8({0x4E2D, 0x6587}), utf8({0x3000}), utf8({0x3000, 'x'}), utf8({0x661, 0x662})});
  // Invalid UTF-8 reaches the words as U+FFFD.
  CHECK(split("gpt-2", "a\xff b") == Words{"a", "\xef\xbf\xbd", " b"});
  CHECK(split("llama-bpe", "").empty());
  CHECK_THROWS_AS(tok::pre_tokenizer_config("no-such-pre"), Error);
}

TEST_CASE("tokenizer: pre-tokenizer word splits of the DeepSeek, Qwen3.5 and other llama.cpp types") {
  auto split = [](std::string_view pre, std::string_view text) {
    return tok::PreTokenizer(tok::pre_tokenizer_config(pre).patterns).split(text);
  };
  using Words = std::vector<std::string>;
  // DeepSeek-LLM, six patterns in turn: newlines alone; cased-script letter runs with one leading space; ASCII and
  // full-width punctuation runs; trailing whitespace; CJK runs; digit runs. "  42 " is left whole until the last.
  CHECK(split("deepseek-llm", "Hello World!\n  42 \xe4\xb8\xad\xe6\x96\x87" "abc") ==
        Words{"Hello", " World", "!", "\n", "  ", "42", " ", "\xe4\xb8\xad\xe6\x96\x87", "abc"});
  // DeepSeek-Coder: letters (any script) and Unicode punctuation with one leading whitespace; digits one by one.
  CHECK(split("deepseek-coder", "foo(bar, 12);\n\tx") ==
        Words{"foo", "(", "bar", ",", " ", "1", "2", ");", "\n", "\tx"});
  // Qwen3.5 keeps combining marks in letter runs, where Qwen2 cuts them off.
  const std::string text = utf8({'c', 'a', 'f', 'e', 0x301, ' ', 'n', 'a', 0x308, 'i', 'v', 'e'}) + " 42 I'M  x\n\n y";
  CHECK(split("qwen35", text) == Words{utf8({'c', 'a', 'f', 'e', 0x301}), utf8({' ', 'n', 'a', 0x308, 'i', 'v', 'e'}),
                                       " ", "4", "2", " I", "'M", " ", " x", "\n\n", " y"});
  CHECK(split("qwen2", text) == Words{"cafe", utf8({0x301}), " na", utf8({0x308, 'i', 'v', 'e'}), " ", "4", "2", " I",
                                      "'M", " ", " x", "\n\n", " y"});
  // SuperBPE: a pattern that only matches empty cuts digit runs into threes from the right.
  CHECK(split("superbpe", "x 1234567 ab") == Words{"x ", "1", "234", "567", " ab"});
  // tiny_aya: digit groups of three from the right (the lead group carries the text before it, which the second
  // pattern splits off again).
  CHECK(split("tiny_aya", "ab12345 c") == Words{"ab", "12", "345", " c"});
  CHECK(tok::PreTokenizer({tok::pre_tokenizer_config("afmoe").patterns[0]}).split("ab12345 c") ==
        Words{"ab12", "345", " c"});
  // Kimi-K2: Han runs apart from other letters; contractions stay on the word; digits in threes.
  CHECK(split("kimi-k2", "Hello\xe4\xb8\x96\xe7\x95\x8c don't 12345") ==
        Words{"Hello", "\xe4\xb8\x96\xe7\x95\x8c", " don't", " ", "123", "45"});
  // Gemma 4 only separates newline runs (spaces are escaped to U+2581 before this split).
  CHECK(split("gemma4", "a b\n\nc\n") == Words{"a b", "\n\n", "c", "\n"});
  // Every name compiles, aliases included; a few of llama.cpp's aliases resolve to the same patterns.
  for (std::string_view name : tok::pre_tokenizer_names()) {
    CAPTURE(name);
    CHECK_NOTHROW((void)split(name, "Hello, World! 123 \xe4\xb8\xad\n  x"));
  }
  CHECK(tok::pre_tokenizer_names().size() >= 90);
  CHECK(tok::pre_tokenizer_config("hy_v4").patterns == tok::pre_tokenizer_config("deepseek-v3").patterns);
  CHECK(tok::pre_tokenizer_config("cohere2moe").patterns == tok::pre_tokenizer_config("tiny_aya").patterns);
  CHECK_FALSE(tok::pre_tokenizer_config("deepseek-llm").clean_spaces);
  CHECK(tok::pre_tokenizer_config("refact").clean_spaces);
  CHECK_FALSE(tok::pre_tokenizer_config("gemma4").byte_encode);
}

