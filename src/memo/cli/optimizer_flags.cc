#include "memo/cli/optimizer_flags.h"

#include <vector>

#include "memo/core/error.h"

namespace memo::cli {
namespace {

// Each optimiser's default hyperparameters, as it reports them (Optimizer::hyperparameters()).
nlohmann::json defaults(const std::string& name) { return hyperparameters_of({name, {}}); }

// RMSprop's smoothing constant `alpha` would clash with the memo strategy's --alpha (the
// offloaded fraction of tokens), so it is --rmsprop-alpha on the command line.
std::string flag_of(const std::string& key) {
  std::string f = key == "alpha" ? "--rmsprop-alpha" : "--" + key;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

std::string names_list() {
  std::string out;
  for (const std::string& n : optimizer_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

void add_optimizer_flags(CLI::App& cmd, OptimizerFlags& flags) {
  flags.name_option = cmd.add_option("--optimizer", flags.name, "Optimiser: " + names_list())
                          ->capture_default_str();
  // key -> "name default, ..." over every optimiser that has it, in the factory's order
  std::map<std::string, std::string> help;
  std::map<std::string, bool> is_bool;
  std::vector<std::string> order;
  for (const std::string& n : optimizer_names()) {
    const nlohmann::json d = defaults(n);  // named: items() would dangle on a temporary
    for (const auto& [key, value] : d.items()) {
      if (!help.count(key)) order.push_back(key);
      help[key] += (help[key].empty() ? "" : ", ") + n + " " + value.dump();
      is_bool[key] = value.is_boolean();
    }
  }
  for (const std::string& key : order) {
    const std::string text = "Optimiser hyperparameter " + key + " (default: " + help[key] + ")";
    if (is_bool[key]) {
      const std::string f = flag_of(key);
      flags.options[key] = cmd.add_flag(f + ",!--no-" + f.substr(2), flags.booleans[key], text);
    } else {
      flags.options[key] = cmd.add_option(flag_of(key), flags.numbers[key], text);
    }
  }
}

OptimizerChoice resolve_optimizer(const OptimizerFlags& flags) {
  OptimizerChoice c;
  c.name = flags.name;
  const nlohmann::json mine = defaults(c.name);
  if (mine.is_null())
    throw ConfigError(str("unknown optimizer '", c.name, "'; valid: ", names_list()));
  nlohmann::json given = nlohmann::json::object();
  for (const auto& [key, option] : flags.options) {
    if (option->count() == 0) continue;
    if (!mine.contains(key)) {
      std::string has;
      for (const auto& [k, v] : mine.items()) has += (has.empty() ? "" : ", ") + flag_of(k);
      throw ConfigError(
          str(flag_of(key), " does not apply to --optimizer ", c.name, "; its flags: ", has));
    }
    given[key] = mine.at(key).is_boolean() ? nlohmann::json(flags.booleans.at(key))
                                           : nlohmann::json(flags.numbers.at(key));
  }
  c.options = with_hyperparameters(c.options, c.name, given);
  return c;
}

}  // namespace memo::cli
