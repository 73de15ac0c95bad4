#include "memo/cli/position_flags.h"

#include <nlohmann/json.hpp>

#include "memo/core/error.h"
#include "memo/io/config_json.h"

namespace memo::cli {

std::vector<const CLI::Option*> add_position_flags(CLI::App& cmd, PositionFlags& f,
                                                   const std::string& use) {
  f.rope_theta_opt = cmd.add_option("--rope-theta", f.rope_theta,
                                    use +
                                        " this RoPE base instead of the model config's (e.g. "
                                        "500000)");
  CLI::Option* scaling = cmd.add_option(
      "--rope-scaling", f.rope_scaling,
      use +
          " this rope_scaling, as JSON in transformers' fields, e.g. "
          "'{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": "
          "8192}' (null: plain RoPE)");
  f.max_positions_opt =
      cmd.add_option("--max-position-embeddings", f.max_positions,
                     use + " this many positions (the longest --seq) instead of the config's");
  return {f.rope_theta_opt, scaling, f.max_positions_opt};
}

PositionOverrides resolve_position_flags(const PositionFlags& f) {
  PositionOverrides p;
  if (f.rope_theta_opt->count() > 0) p.rope_theta = f.rope_theta;
  if (f.max_positions_opt->count() > 0) p.max_position_embeddings = f.max_positions;
  if (!f.rope_scaling.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f.rope_scaling);
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(
          str("--rope-scaling ", f.rope_scaling, ": malformed JSON at byte ", e.byte));
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range
      throw ConfigError(str("--rope-scaling ", f.rope_scaling, ": ", e.what()));
    }
    p.rope_scaling = rope_scaling_from_json(j, "--rope-scaling");
  }
  return p;
}

}  // namespace memo::cli
