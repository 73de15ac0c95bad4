// Implementation of io/crc32c.h.
#include "memo/io/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace memo {
namespace {

constexpr uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c_ref(uint32_t crc, std::string_view bytes) {
  uint32_t c = ~crc;
  for (unsigned char b : bytes) c = kTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(uint32_t crc, std::string_view bytes) {
#if defined(__SSE4_2__)
  uint64_t c = ~crc;
  const char* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // memcpy: the buffer need not be 8-byte aligned
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = uint32_t(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, uint8_t(*p));
  return ~c32;
#else
  return crc32c_ref(crc, bytes);
#endif
}

}  // namespace memo
