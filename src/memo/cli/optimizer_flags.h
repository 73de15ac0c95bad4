// The optimiser flags shared by `memo train` and `memo sweep`: --optimizer NAME and one flag per
// hyperparameter of any optimiser (--beta1, --momentum, --relative-step, ...), each documented
// with every optimiser's default. A flag the chosen optimiser does not have is an error.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "memo/train/optimizer_setup.h"

namespace memo::cli {

struct OptimizerFlags {
  std::string name = "adamw";
  std::map<std::string, double> numbers;        // by hyperparameter key (beta1, weight_decay)
  std::map<std::string, bool> booleans;         // nesterov, centered, relative_step
  std::map<std::string, CLI::Option*> options;  // to tell which were given
  CLI::Option* name_option = nullptr;           // --optimizer, to tell whether it was given
};

// Registers the flags on `command`; `flags` must outlive parsing.
void add_optimizer_flags(CLI::App& command, OptimizerFlags& flags);

// The named optimiser with the given flags over its defaults. Throws ConfigError for an unknown
// name (listing the valid ones) or a flag the optimiser lacks (listing the ones it has).
OptimizerChoice resolve_optimizer(const OptimizerFlags& flags);

}  // namespace memo::cli
