// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum memo stores in its files.
// Uses the SSE4.2 crc32 instruction when the build has it, otherwise a table; both give the same
// value (crc32c("123456789") = 0xE3069283), so files move freely between machines.
#pragma once

#include <cstdint>
#include <string_view>

namespace memo {

// Extends `crc` (the checksum of the bytes before, 0 for none) over `bytes`, like zlib's crc32().
uint32_t crc32c(uint32_t crc, std::string_view bytes);

// The table version, always available; the oracle the fast path is tested against.
uint32_t crc32c_ref(uint32_t crc, std::string_view bytes);

}  // namespace memo
