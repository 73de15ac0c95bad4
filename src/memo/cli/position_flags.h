// --rope-theta, --rope-scaling and --max-position-embeddings: a model's positions changed for the
// command (memo train: a context-extension run, saved with its config.json; memo eval and memo
// plan --config: a checkpoint or config evaluated or planned past its own context).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "memo/model/config.h"

namespace memo::cli {

struct PositionFlags {
  std::string rope_scaling;  // --rope-scaling's JSON
  double rope_theta = 0;
  int64_t max_positions = 0;
  CLI::Option* rope_theta_opt = nullptr;
  CLI::Option* max_positions_opt = nullptr;
};

// Registers the three flags on `cmd`; `use` opens each help text ("Train with", "Evaluate with").
// `flags` must outlive parsing. Returns the options, in the order above (for a command that refuses
// them in one of its modes).
std::vector<const CLI::Option*> add_position_flags(CLI::App& cmd, PositionFlags& flags,
                                                   const std::string& use);

// The overrides the flags give (none where none is given). Throws ConfigError for malformed
// --rope-scaling JSON or fields (rope_scaling_from_json).
PositionOverrides resolve_position_flags(const PositionFlags& flags);

}  // namespace memo::cli
