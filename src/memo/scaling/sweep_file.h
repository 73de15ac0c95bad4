// The sweep file `memo sweep` appends to and `memo fit` reads: JSON lines, one finished run each
// (fields in cli/sweep_command.cc). Reading checks every line and names the first bad one by
// number. Not here: running sweeps or fitting them (fit.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace memo::scaling {

struct SweepLine {
  int64_t line = 0;    // 1-based line number in the file
  nlohmann::json run;  // the object; has optimizer (string), lr > 0, batch_tokens > 0
};

struct SweepFile {
  std::vector<SweepLine> lines;
  bool truncated_tail = false;  // the last line had no newline (a write cut short) and was dropped
};

// Throws DataError when the file cannot be read, FormatError "PATH line N: ..." for a line that is
// not a JSON object with the required fields, or whose seed, losses or curve are not of the types
// memo sweep writes. Blank lines are skipped.
SweepFile read_sweep_file(const std::string& path);

// A loss-like value of a run: the number, or +inf for null / absent (a diverged or unfinished run).
double loss_field(const nlohmann::json& run, const std::string& key);

// The optimiser setting of a run: "name {hyperparameters}", to keep one setting per fit.
std::string run_setting(const nlohmann::json& run);

// The fields that make a run's setup: all but its grid point (lr, batch_tokens, seed) and what it
// measured. The runs of one sweep, and of one fit, share them. Not micro_batch: it splits a
// step's gradient into parts without changing its sum (beyond rounding), so a study that runs its
// large batches in larger micro-batches (bench/surge_study.sh) is one setup.
inline constexpr const char* kSetupFields[] = {
    "optimizer",   "hyperparameters", "model",       "data",       "val_data", "val_fraction",
    "val_windows", "precision",       "seq",         "budget",     "warmup",   "min_lr_ratio",
    "clip",        "target_loss",     "extra_steps", "loss_window"};
// The first setup field both runs have with different values, or that a target-loss run has and
// the other lacks (target_loss, extra_steps); "" when there is none (another field one of them
// lacks, as lines of an older memo lack the model, data and precision, is not compared).
// for_fit: a fit's runs, where two target-loss runs' budgets may differ (there it only caps a run
// that does not reach the target, which counts as not reaching it whatever the cap; a sweep file
// keeps one cap, so that a rerun does not skip a run an earlier, smaller cap cut short).
std::string differing_setup_field(const nlohmann::json& a, const nlohmann::json& b,
                                  bool for_fit = false);

}  // namespace memo::scaling
