// A bound on a number flag's value, said in words, for every subcommand's flags.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "memo/core/error.h"

namespace memo::cli {

// CLI11's NonNegativeNumber prints its range's ends as doubles ("not in range 0.000000 to
// 17976931348623157...000000"); this says "must be 0 or more, got -3". A value that is no number
// passes here: the option's own conversion refuses it.
inline CLI::Validator number_check(bool positive) {
  return CLI::Validator(
      [positive](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || (positive ? v > 0 : v >= 0)) return "";
        return str("must be ", positive ? "above 0" : "0 or more", ", got ", s);
      },
      positive ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace memo::cli

namespace memo::cli {

// CLI11 converts an empty value to the type's default: `--alpha ""` would run with alpha 0, the
// user having meant no such thing; and it clamps an integer past 64 bits to the largest one, so
// that a later bound would quote a number the user never gave. Every number flag of `app` and its
// subcommands refuses both.
inline void refuse_empty_numbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    const bool integer = type.rfind("INT", 0) == 0 || is_unsigned;
    if (!integer && type.rfind("FLOAT", 0) != 0) continue;
    opt->check(CLI::Validator(
        [integer, is_unsigned](std::string& s) -> std::string {
          if (s.empty()) return "a number is needed, got ''";
          if (!integer) return "";
          // decimal, and the 0x hexadecimal CLI11 also reads
          const size_t sign = s[0] == '-' || s[0] == '+' ? 1 : 0;
          const bool hex =
              s.size() > sign + 2 && s[sign] == '0' && (s[sign + 1] == 'x' || s[sign + 1] == 'X');
          for (const int base : {10, 16}) {
            if (base == 16 && !hex) continue;
            errno = 0;
            char* end = nullptr;
            if (is_unsigned)
              (void)std::strtoull(s.c_str(), &end, base);
            else
              (void)std::strtoll(s.c_str(), &end, base);
            if (errno == ERANGE && end != s.c_str() && *end == '\0')
              return str("must fit in 64 bits, got ", s);
          }
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_numbers(*sub);
}

}  // namespace memo::cli
