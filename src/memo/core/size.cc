#include "memo/core/size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "memo/core/error.h"

namespace memo {

int64_t parse_bytes(std::string_view text, std::string_view flag) {
  const auto fail = [&](std::string_view why) {
    return ConfigError(str(flag, " '", text, "': ", why,
                           "; give bytes with an optional unit B, KiB, MiB, GiB, TiB (1024^n) or "
                           "KB, MB, GB, TB (1000^n), e.g. 1.5GiB"));
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (i == 0 || ec != std::errc() || end != text.data() + i) throw fail("not a number");
  std::string unit;
  for (char c : text.substr(i))
    if (!std::isspace(static_cast<unsigned char>(c)))
      unit += char(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0.0;
  if (unit.empty() || unit == "B") scale = 1.0;
  const char* kPrefixes = "KMGT";
  for (int p = 0; p < 4; ++p) {
    if (unit == std::string(1, kPrefixes[p]) + "IB") scale = std::pow(1024.0, p + 1);
    if (unit == std::string(1, kPrefixes[p]) + "B") scale = std::pow(1000.0, p + 1);
  }
  if (scale == 0.0) throw fail(str("unknown unit '", text.substr(i), "'"));
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes >= 9.2e18) throw fail("too large");
  return int64_t(bytes);
}

}  // namespace memo
