// greta-vk tokenize MODEL TEXT: the token ids of TEXT under MODEL's tokenizer, space-separated on one line, with the
// BOS (and EOS) tokens the model adds. Works on any GGUF with tokenizer metadata, vocabulary-only files included.
#include <cstdio>
#include <string>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace greta::cli {

namespace {

constexpr OptionSpec k_tokenize_options[] = {
    {"no-bos", nullptr, false, "leave out the BOS token the model would add"},
    {"pieces", nullptr, false, "print id:'piece' pairs (the vocabulary strings) instead of bare ids"},
    {"parse-special", nullptr, false, "recognise special-token text such as <|im_start|> or <s> in TEXT"},
    {"help", "h", false, "show this help"},
};

constexpr const char* k_usage = "greta-vk tokenize MODEL TEXT [--no-bos] [--pieces] [--parse-special]";

// A vocabulary string on one line: quotes, backslashes and control bytes escaped.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\' || c == '\'') out += cat('\\', c);
    else if (u < 0x20 || u == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args args(argc, argv, k_tokenize_options);
  if (args.has("help")) {
    std::printf("usage: %s\n\nPrints the token ids of TEXT, space-separated on one line.\n\n%s", k_usage,
                usage_options(k_tokenize_options).c_str());
    return 0;
  }
  args.expect_positional(2, 2, k_usage);
  const model::GgufFile file = model::GgufFile::open(args.positional()[0]);
  const model::Tokenizer tokenizer = model::Tokenizer::from_gguf(file);

  std::vector<model::TokenId> ids = tokenizer.encode(args.positional()[1], /*add_special=*/true,
                                                     /*parse_special=*/args.has("parse-special"));
  // --no-bos drops only the BOS the model added (an EOS the model appends stays).
  if (args.has("no-bos") && tokenizer.add_bos() && !ids.empty() && ids.front() == tokenizer.bos())
    ids.erase(ids.begin());

  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
    if (args.has("pieces")) line += cat(":'", printable(tokenizer.token_text(ids[i])), "'");
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace greta::cli
