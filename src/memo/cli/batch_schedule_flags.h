// The flags of `memo train --batch-schedule noise` (scaling/batch_schedule.h): the controller's
// own options, and the law's parameters given (--eps-max, --b-noise) or fitted to a `memo sweep`
// file (--fit, as memo fit does). Every check of a flag's value happens before training prints
// anything: here (names, combinations) and in scaling::check_options (ranges, the micro-batch
// grid), which train() runs before its first line.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memo/scaling/batch_schedule.h"
#include "memo/train/optimizer_setup.h"

namespace memo::cli {

struct BatchScheduleFlags {
  std::string name = "fixed";             // --batch-schedule: fixed or noise
  scaling::BatchScheduleOptions options;  // the controller's flags, over its defaults
  std::string law;                        // --law; empty: by the optimiser (law_for_optimizer)
  double eps_max = 0.0, b_noise = 0.0;
  std::string fit;                       // --fit SWEEP.jsonl
  std::vector<CLI::Option*> noise_only;  // the flags that apply to --batch-schedule noise only
  CLI::Option* eps_max_opt = nullptr;
  CLI::Option* b_noise_opt = nullptr;
  CLI::Option* fit_opt = nullptr;
};

// Registers the flags on `command`; `flags` must outlive parsing.
void add_batch_schedule_flags(CLI::App& command, BatchScheduleFlags& flags);

// None for --batch-schedule fixed. For noise: the controller's flags with the law chosen (--law,
// or law_for_optimizer(optimizer_name)) and its parameters given or fitted; train() fills in
// the run's shape and token schedule. When resuming, the law is left unresolved: the checkpoint's
// schedule continues (train() refuses to add one to a run that had none). Throws ConfigError with
// one line for an unknown name, a noise flag without noise, or missing or doubled law parameters;
// a --fit sweep of another optimiser setting or (seq > 0) another --seq than the run's, whose lrs
// are not this run's, or one whose fit puts B_noise at 0 (the sweep does not pin it down).
std::optional<scaling::BatchScheduleOptions> resolve_batch_schedule(
    const BatchScheduleFlags& flags, const OptimizerChoice& optimizer, int64_t seq, bool resuming);

}  // namespace memo::cli
