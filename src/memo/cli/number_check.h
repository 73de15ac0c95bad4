// A bound on a number flag's value, said in words, for every subcommand's flags.
#pragma once

#include <CLI/CLI.hpp>
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
