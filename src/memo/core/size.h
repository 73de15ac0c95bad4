// Parsing of memory sizes given on the command line ("1.5GiB", "512MiB", "2GB", "4096"). Binary
// units KiB, MiB, GiB, TiB (powers of 1024), decimal units KB, MB, GB, TB (powers of 1000), B or no
// unit for bytes; units are
// case-insensitive ("gib" is GiB, "gb" is GB).
#pragma once

#include <cstdint>
#include <string_view>

namespace memo {

// Bytes in `text`, rounded down to whole bytes. Throws ConfigError naming `flag` (for example
// "--host-memory"), the text and the accepted forms on a bad number, unit or a size < 0.
int64_t parse_bytes(std::string_view text, std::string_view flag);

}  // namespace memo
