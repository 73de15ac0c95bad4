#include "memo/core/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "memo/core/error.h"

namespace memo {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

int64_t parse_bytes(std::string_view text) {
  const auto bad = [&](const char* why) {
    return ConfigError(str("size '", text, "' ", why,
                           "; write a number and an optional unit: B, KiB, MiB, GiB, TiB (K, M, G, "
                           "T the same), kB, MB, GB, TB, e.g. 1.5GiB"));
  };
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  if (end == 0) throw bad("does not start with a non-negative number");
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + end, value);
  if (ec != std::errc() || ptr != text.data() + end) throw bad("has a malformed number");
  std::string_view unit = text.substr(end);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},     {"b", 1.0},      {"k", 0x1p10},   {"kib", 0x1p10}, {"kb", 1e3},
      {"m", 0x1p20}, {"mib", 0x1p20}, {"mb", 1e6},     {"g", 0x1p30},   {"gib", 0x1p30},
      {"gb", 1e9},   {"t", 0x1p40},   {"tib", 0x1p40}, {"tb", 1e12},
  };
  const std::string u = lower(unit);
  for (const auto& [name, scale] : kUnits) {
    if (u != name) continue;
    const double bytes = std::floor(value * scale);
    if (!(bytes <= 0x1p62)) throw bad("is larger than 2^62 bytes");
    if (bytes == 0 && value > 0) throw bad("is less than one byte");
    return int64_t(bytes);
  }
  throw bad("has an unknown unit");
}

std::optional<int64_t> parse_token_count(std::string_view text) {
  int shift = 0;
  if (!text.empty()) {
    const char c = char(std::tolower(static_cast<unsigned char>(text.back())));
    shift = c == 'k' ? 10 : c == 'm' ? 20 : c == 'g' ? 30 : 0;
    if (shift > 0) text.remove_suffix(1);
  }
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v <= 0 ||
      v > (int64_t(1) << (62 - shift)))
    return std::nullopt;
  return v << shift;
}

std::string format_bytes(int64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int unit = 0;
  while (unit < 4 && std::fabs(v) >= 1024.0) {
    v /= 1024.0;
    ++unit;
  }
  char buf[48];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kNames[unit]);
  return buf;
}

int64_t parse_bytes(std::string_view text, std::string_view flag) {
  try {
    return parse_bytes(text);
  } catch (const ConfigError& e) {
    throw ConfigError(str(flag, " '", text, "': ", e.what()));
  }
}

std::string duration_str(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else if (s < 9.2e18)  // hours of a run of up to 2^62 tokens: past an int
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s) / 3600,
                  static_cast<long long>(s) % 3600 / 60);
  else
    std::snprintf(buf, sizeof buf, "%.3gs", s);
  return buf;
}

double parse_duration(std::string_view text, std::string_view flag) {
  const auto bad = [&] {
    return ConfigError(str(flag, " '", text,
                           "': write a duration of hours, minutes and seconds, e.g. 3h50m, 90m, "
                           "45s or 1h30m15s (a bare number is seconds)"));
  };
  double seconds = 0.0;
  size_t i = 0;
  int last_unit = -1;  // 0 h, 1 m, 2 s: each once, in that order
  while (i < text.size()) {
    size_t end = i;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
      ++end;
    if (end == i) throw bad();
    double value = 0.0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, value);
    if (ec != std::errc() || ptr != text.data() + end) throw bad();
    int unit = 2;  // a bare number: seconds, and it must be the last thing
    if (end < text.size()) {
      const char u = char(std::tolower(static_cast<unsigned char>(text[end])));
      unit = u == 'h' ? 0 : u == 'm' ? 1 : u == 's' ? 2 : -1;
      if (unit < 0) throw bad();
      ++end;
    } else if (last_unit >= 0) {
      throw bad();  // "3h20": minutes or seconds?
    }
    if (unit <= last_unit) throw bad();
    last_unit = unit;
    seconds += value * (unit == 0 ? 3600.0 : unit == 1 ? 60.0 : 1.0);
    i = end;
  }
  if (text.empty() || !std::isfinite(seconds)) throw bad();
  if (!(seconds > 0.0))
    throw ConfigError(str(flag, " '", text, "' is no time at all: give a duration above 0"));
  return seconds;
}

std::string shell_word(std::string_view word) {
  const auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_-./:,+=@%").find(c) != std::string_view::npos;
  };
  if (!word.empty() && std::all_of(word.begin(), word.end(), plain)) return std::string(word);
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string absolute_or_empty(const std::string& path) {
  // not lexically_normal: "link/.." is where the link leads, then up, which only the file system
  // resolves
  return path.empty() ? path : std::filesystem::absolute(path).string();
}

}  // namespace memo
