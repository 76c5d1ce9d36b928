// Tokenizer::from_gguf: reads the tokenizer.ggml.* metadata into a TokenizerVocab. Kept apart from tokenizer.cpp so
// that code building tokenizers from plain data does not pull in the GGUF reader.
#include <limits>

#include "core/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace greta::model {

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  TokenizerVocab v;
  const auto model = file.get_string("tokenizer.ggml.model");
  if (!model) fail(file.path(), ": no tokenizer in the file (tokenizer.ggml.model is missing)");
  v.model = std::string(*model);
  v.pre = std::string(file.get_string("tokenizer.ggml.pre").value_or(""));
  v.model_name = std::string(file.get_string("general.name").value_or(""));

  if (!file.find("tokenizer.ggml.tokens")) fail(file.path(), ": tokenizer.ggml.tokens is missing");
  for (std::string_view token : file.get_string_array("tokenizer.ggml.tokens")) v.tokens.emplace_back(token);
  v.scores = file.get_float_array("tokenizer.ggml.scores");
  for (int64_t type : file.get_int_array("tokenizer.ggml.token_type")) {
    const bool fits = type >= std::numeric_limits<int32_t>::min() && type <= std::numeric_limits<int32_t>::max();
    v.token_types.push_back(fits ? static_cast<int32_t>(type) : 0);  // unknown types become "undefined"
  }
  // llama.cpp requires merges of every BPE vocabulary but Kimi-K2's.
  if ((v.model == "gpt2" || v.model == "gemma4") && v.pre != "kimi-k2" && !file.find("tokenizer.ggml.merges"))
    fail(file.path(), ": BPE tokenizer without merges (tokenizer.ggml.merges is missing)");
  for (std::string_view merge : file.get_string_array("tokenizer.ggml.merges")) v.merges.emplace_back(merge);

  v.bos = file.get_int("tokenizer.ggml.bos_token_id");
  v.eos = file.get_int("tokenizer.ggml.eos_token_id");
  v.eot = file.get_int("tokenizer.ggml.eot_token_id");
  v.eom = file.get_int("tokenizer.ggml.eom_token_id");
  v.unk = file.get_int("tokenizer.ggml.unknown_token_id");
  v.sep = file.get_int("tokenizer.ggml.seperator_token_id");  // sic: llama.cpp's key name
  v.pad = file.get_int("tokenizer.ggml.padding_token_id");
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix");
  v.lowercase = file.get_bool("tokenizer.ggml.normalizer.lowercase");
  v.strip_accents = file.get_bool("tokenizer.ggml.normalizer.strip_accents");
  try {
    return from_vocab(std::move(v));
  } catch (const Error& e) {
    fail(file.path(), ": ", e.what());
  }
}

}  // namespace greta::model
