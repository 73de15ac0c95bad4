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

namespace memo::cli {

// CLI11 converts an empty value to the type's default: `--alpha ""` would run with alpha 0, the
// user having meant no such thing. Every number flag of `app` and its subcommands refuses one.
inline void refuse_empty_numbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0 && type.rfind("FLOAT", 0) != 0)
      continue;
    opt->check(CLI::Validator(
        [](std::string& s) -> std::string { return s.empty() ? "a number is needed, got ''" : ""; },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_numbers(*sub);
}

}  // namespace memo::cli
