// BPE (tokenizer.ggml.model = "gpt2", and "gemma4"'s SPM-style BPE over raw UTF-8): the GPT-2 byte <-> code point
// mapping and ranked merging inside one pre-tokenized word, as llama.cpp's llm_tokenizer_bpe_session does it.
#include <cstdio>
#include <queue>

#include "model/tokenizer_internal.h"

namespace greta::model::tok {

// ---- GPT-2 byte mapping ---------------------------------------------------------------------------------------------
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes (controls, space, 0x7F..0xA0,
// 0xAD) take U+0100, U+0101, ... in byte order. So ' ' is U+0120 "Ġ" and '\n' is U+010A "Ċ".
ByteLevelCodec::ByteLevelCodec() {
  cpt_byte_.fill(-1);
  auto maps_to_itself = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cpt = maps_to_itself(b) ? static_cast<uint32_t>(b) : 256u + next_extra++;
    append_utf8(byte_text_[b], cpt);
    cpt_byte_[cpt] = static_cast<int16_t>(b);
  }
}

std::string ByteLevelCodec::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_text_[static_cast<uint8_t>(c)];
  return out;
}

std::string ByteLevelCodec::decode(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for (uint32_t cpt : decode_utf8_lenient(text)) {
    if (cpt < cpt_byte_.size() && cpt_byte_[cpt] >= 0) {
      out.push_back(static_cast<char>(cpt_byte_[cpt]));
      continue;
    }
    // Not a byte-level character: llama.cpp writes a marker with the character's UTF-8 and the whole token.
    std::string utf8;
    append_utf8(utf8, cpt);
    out += "[UNK_BYTE_0x";
    for (char c : utf8) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
      out += hex;
    }
    out.append(text);
    out += "]";
  }
  return out;
}

// ---- Ranked merges --------------------------------------------------------------------------------------------------

namespace {
// The map key of a pair: left's length, then both texts. A merge string is split llama.cpp's way, at the first space
// after its first byte, so a pair whose left side contains a space is never found, as there.
void pair_key(std::string& key, std::string_view left, std::string_view right) {
  const uint32_t n = static_cast<uint32_t>(left.size());
  key.assign(reinterpret_cast<const char*>(&n), sizeof(n));
  key.append(left);
  key.append(right);
}
}  // namespace

BpeRanks::BpeRanks(const std::vector<std::string>& merges) {
  ranks_.reserve(merges.size());
  std::string key;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view merge = merges[i];
    const size_t space = merge.size() < 2 ? std::string_view::npos : merge.find(' ', 1);
    if (space == std::string_view::npos) continue;  // llama.cpp files it under an empty pair, never looked up
    pair_key(key, merge.substr(0, space), merge.substr(space + 1));
    ranks_.try_emplace(key, static_cast<int32_t>(i));  // the first occurrence keeps its rank
  }
}

int BpeRanks::rank(std::string_view left, std::string_view right, std::string& scratch) const {
  pair_key(scratch, left, right);
  auto it = ranks_.find(std::string_view(scratch));
  return it == ranks_.end() ? -1 : it->second;
}

namespace {

// A run of the word [start, start + n); merged symbols keep their start and absorb their right neighbour.
struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t n;
};

struct Bigram {
  int left;
  int right;
  int rank;
  size_t size;  // bytes of left + right when queued: a later size mismatch means the pair is outdated
};

// Lowest rank first; among equal ranks the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void bpe_encode_word(const TokenTable& table, const BpeRanks& ranks, const BpeWordOptions& options,
                     std::string_view word, std::vector<TokenId>& out) {
  if (word.empty()) return;
  if (options.ignore_merges || (options.newline_runs_whole && word.find_first_not_of('\n') == std::string::npos)) {
    const TokenId whole = table.find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min(word.size() - off, utf8_sequence_length(word[off]));
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, off + n == word.size() ? -1 : index + 1, off, n});
    off += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::string scratch;
  auto text_of = [&](int i) { return word.substr(symbols[i].start, symbols[i].n); };
  auto add_bigram = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int r = ranks.rank(text_of(left), text_of(right), scratch);
    if (r < 0) return;
    queue.push({left, right, r, symbols[left].n + symbols[right].n});
  };

  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;  // outdated
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    add_bigram(left.prev, bigram.left);
    add_bigram(bigram.left, left.next);
  }

  for (int i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece = text_of(i);
    if (piece.empty()) continue;
    const TokenId id = table.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // No token for the merged piece: its single bytes, where those are tokens; the rest is dropped like llama.cpp.
    for (char c : piece) {
      TokenId byte_id;
      if (options.hex_byte_tokens) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(c)));
        byte_id = table.find(name);
      } else {
        byte_id = table.find(std::string_view(&c, 1));
      }
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace greta::model::tok
