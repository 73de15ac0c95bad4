// Implementation of data/byte_level.h.
#include "memo/data/byte_level.h"

namespace memo {
namespace {

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else {  // the alphabet stays below U+0144
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// Inverse of the alphabet for code points below 512 (all of it); -1 where unused.
std::array<int, 512> inverse_alphabet() {
  std::array<int, 512> inverse;
  inverse.fill(-1);
  const std::array<char32_t, 256> alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) inverse[size_t(alphabet[size_t(b)])] = b;
  return inverse;
}

}  // namespace

std::array<char32_t, 256> byte_level_alphabet() {
  std::array<char32_t, 256> alphabet{};
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) alphabet[size_t(b)] = printable(b) ? char32_t(b) : next++;
  return alphabet;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  static const std::array<int, 512> inverse = inverse_alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c0 = static_cast<unsigned char>(text[i]);
    char32_t c;
    if (c0 < 0x80) {
      c = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      c = char32_t(c0 & 0x1F) << 6 | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // the alphabet has no 3- or 4-byte characters
    }
    if (c >= inverse.size() || inverse[c] < 0) return std::nullopt;
    out += char(inverse[c]);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  static const std::array<char32_t, 256> alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, alphabet[static_cast<unsigned char>(b)]);
  return out;
}

}  // namespace memo
