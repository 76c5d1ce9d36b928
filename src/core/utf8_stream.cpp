#include "core/utf8_stream.h"

namespace greta {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the UTF-8 sequence a lead byte starts (0: not a lead byte), and the range its second byte must be in
// (this excludes overlong forms, surrogates and values past U+10FFFF, as the Unicode standard's table 3-7 does).
int sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}
bool valid_second_byte(unsigned char lead, unsigned char c) {
  switch (lead) {
    case 0xE0: return c >= 0xA0 && c <= 0xBF;
    case 0xED: return c >= 0x80 && c <= 0x9F;
    case 0xF0: return c >= 0x90 && c <= 0xBF;
    case 0xF4: return c >= 0x80 && c <= 0x8F;
    default: return c >= 0x80 && c <= 0xBF;
  }
}

}  // namespace

std::string Utf8Stream::push(std::string_view piece) {
  pending_.append(piece);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const auto lead = static_cast<unsigned char>(pending_[i]);
    const int length = sequence_length(lead);
    if (length == 0) {  // a stray continuation byte or a byte that never starts a character
      out += kReplacement;
      ++i;
      continue;
    }
    // Check the bytes present; stop at the end of the buffer if the sequence is a valid but incomplete prefix.
    int have = 1;
    bool broken = false;
    while (have < length && i + size_t(have) < pending_.size()) {
      const auto c = static_cast<unsigned char>(pending_[i + size_t(have)]);
      if (have == 1 ? !valid_second_byte(lead, c) : (c < 0x80 || c > 0xBF)) {
        broken = true;
        break;
      }
      ++have;
    }
    if (broken) {  // the maximal valid prefix becomes one U+FFFD; the offending byte is looked at again
      out += kReplacement;
      i += size_t(have);
      continue;
    }
    if (have < length) break;  // incomplete: hold it back
    out.append(pending_, i, size_t(length));
    i += size_t(length);
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = pending_.empty() ? "" : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace greta
