// SentencePiece-style tokenization (tokenizer.ggml.model = "llama"), as llama.cpp's llm_tokenizer_spm_session does it:
// start from one symbol per UTF-8 character, repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary token (ties: leftmost), and emit every final symbol that is no token as <0xNN> bytes.
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "model/tokenizer_internal.h"

namespace greta::model::tok {

namespace {

// A run of the text [start, start + n); a merged symbol keeps its start and absorbs its right neighbour.
struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of left + right when queued: a later size mismatch means the pair is outdated
};

// Highest score first; among equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

TokenId byte_token(const TokenTable& table, TokenId unk, uint8_t byte) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(byte));
  TokenId id = table.find(name);
  if (id >= 0) return id;
  const char raw = static_cast<char>(byte);
  id = table.find(std::string_view(&raw, 1));  // llama.cpp's fallback: the byte itself as a token
  if (id >= 0) return id;
  if (unk >= 0) return unk;  // llama.cpp would throw here; an unknown token keeps the output well-formed
  fail("the vocabulary has no token for byte ", name, " and no unknown token");
}

class SpmSession {
public:
  SpmSession(const TokenTable& table, TokenId unk, std::string_view text) : table_(table), unk_(unk), text_(text) {}

  void run(std::vector<TokenId>& out) {
    for (size_t off = 0; off < text_.size();) {
      const size_t n = std::min(text_.size() - off, utf8_sequence_length(text_[off]));
      const int index = static_cast<int>(symbols_.size());
      symbols_.push_back({index - 1, off + n == text_.size() ? -1 : index + 1, off, n});
      off += n;
    }
    if (symbols_.empty()) return;
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add_bigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram bigram = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[bigram.left];
      Symbol& right = symbols_[bigram.right];
      if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;  // outdated
      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[right.next].prev = bigram.left;
      try_add_bigram(left.prev, bigram.left);
      try_add_bigram(bigram.left, left.next);
    }
    for (int i = 0; i != -1; i = symbols_[i].next) resegment(i, out, 0);
  }

private:
  std::string_view text_of(int i) const { return text_.substr(symbols_[i].start, symbols_[i].n); }

  void try_add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view joined = text_.substr(symbols_[left].start, symbols_[left].n + symbols_[right].n);
    const TokenId id = table_.find(joined);
    if (id < 0) return;
    queue_.push({left, right, table_.entries[id].score, joined.size()});
    rev_merge_[joined] = {left, right};
  }

  // A final symbol: its token, else the pair it was merged from, else its bytes.
  void resegment(int i, std::vector<TokenId>& out, size_t depth) {
    const std::string_view piece = text_of(i);
    const TokenId id = table_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    auto it = rev_merge_.find(piece);
    if (it == rev_merge_.end() || depth > text_.size()) {
      for (char c : piece) out.push_back(byte_token(table_, unk_, static_cast<uint8_t>(c)));
      return;
    }
    const auto [left, right] = it->second;
    resegment(left, out, depth + 1);
    resegment(right, out, depth + 1);
  }

  const TokenTable& table_;
  TokenId unk_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
  std::unordered_map<std::string_view, std::pair<int, int>> rev_merge_;
};

}  // namespace

void spm_encode(const TokenTable& table, TokenId unk, std::string_view text, std::vector<TokenId>& out) {
  SpmSession(table, unk, text).run(out);
}

}  // namespace greta::model::tok
