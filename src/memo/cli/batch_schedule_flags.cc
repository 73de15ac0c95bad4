#include "memo/cli/batch_schedule_flags.h"

#include <iostream>

#include "memo/core/error.h"
#include "memo/scaling/sweep_analysis.h"
#include "memo/scaling/sweep_file.h"

namespace memo::cli {

void add_batch_schedule_flags(CLI::App& cmd, BatchScheduleFlags& f) {
  scaling::BatchScheduleOptions& o = f.options;
  cmd.add_option("--batch-schedule", f.name,
                 "fixed: --batch every step; noise: start at --batch and grow the batch in "
                 "micro-batches to track --noise-multiple x the noise scale B_simple, lr from the "
                 "law for each batch, warm-up and decay in tokens (needs >= 2 micro-batches per "
                 "step; the run ends after --steps x --batch x --seq tokens)")
      ->capture_default_str();
  f.noise_only = {
      cmd.add_option("--noise-multiple", o.noise_multiple,
                     "noise: K, the batch tracks K x B_simple (tokens)")
          ->capture_default_str(),
      cmd.add_option("--max-batch", o.max_batch,
                     "noise: the most sequences per step, a multiple of --micro-batch (default: 16 "
                     "x --batch)"),
      cmd.add_option("--noise-hysteresis", o.hysteresis,
                     "noise: grow only while K x B_simple >= (1 + this) x the batch in tokens")
          ->capture_default_str(),
      cmd.add_option("--noise-patience", o.patience,
                     "noise: consecutive steps above that band before the batch grows")
          ->capture_default_str(),
      cmd.add_option("--noise-min-steps", o.min_observations,
                     "noise: steps with a B_simple before the first change")
          ->capture_default_str(),
      cmd.add_option("--law", f.law,
                     "noise: the lr law, surge or sgd (default: sgd for --optimizer sgd, surge for "
                     "the others)"),
  };
  f.eps_max_opt = cmd.add_option("--eps-max", f.eps_max, "noise: the law's eps_max (its lr scale)");
  f.b_noise_opt = cmd.add_option("--b-noise", f.b_noise, "noise: the law's B_noise in tokens");
  f.fit_opt = cmd.add_option(
      "--fit", f.fit, "noise: fit eps_max and B_noise to this memo sweep file (as memo fit does)");
  f.noise_only.insert(f.noise_only.end(), {f.eps_max_opt, f.b_noise_opt, f.fit_opt});
}

namespace {

// --fit's sweep must be of this run's optimiser setting and length: the lrs it fits are theirs.
void check_sweep_setup(const scaling::SweepFile& sweep, const std::string& path,
                       const OptimizerChoice& optimizer, int64_t seq) {
  if (sweep.lines.empty()) return;  // analyse_sweep says so
  const nlohmann::json& run = sweep.lines.front().run;
  const nlohmann::json mine{{"optimizer", optimizer.name},
                            {"hyperparameters", hyperparameters_of(optimizer)}};
  // a sweep written by hand may leave the hyperparameters out: the name is then what it says
  if (run.value("optimizer", nlohmann::json()) != mine.at("optimizer") ||
      (run.contains("hyperparameters") && run.at("hyperparameters") != mine.at("hyperparameters")))
    throw ConfigError(str("--fit ", path, " swept ", scaling::run_setting(run),
                          "; this run trains ", scaling::run_setting(mine),
                          ": the law's lrs are those of the setting swept (give its --optimizer "
                          "and flags, or fit a sweep of this one)"));
  if (seq > 0 && run.contains("seq") && run.at("seq") != seq)
    throw ConfigError(str("--fit ", path, " swept --seq ", run.at("seq").dump(),
                          "; this run trains --seq ", seq,
                          ": the law's batches and lrs are those of the length swept"));
}

}  // namespace

std::optional<scaling::BatchScheduleOptions> resolve_batch_schedule(
    const BatchScheduleFlags& f, const OptimizerChoice& optimizer, int64_t seq, bool resuming) {
  const std::string& optimizer_name = optimizer.name;
  if (f.name != "fixed" && f.name != "noise")
    throw ConfigError(str("--batch-schedule ", f.name, " is not fixed or noise"));
  if (f.name == "fixed") {
    for (const CLI::Option* opt : f.noise_only)
      if (opt->count() > 0)
        throw ConfigError(str(opt->get_name(), " applies to --batch-schedule noise only"));
    return std::nullopt;
  }
  scaling::BatchScheduleOptions o = f.options;
  if (resuming) return o;  // the checkpoint's schedule is restored over it
  if (!f.law.empty() && f.law != "surge" && f.law != "sgd")
    throw ConfigError(str("--law ", f.law, " is not surge or sgd"));
  o.law = f.law.empty()      ? scaling::law_for_optimizer(optimizer_name)
          : f.law == "surge" ? scaling::Law::kSurge
                             : scaling::Law::kSgd;
  const bool given = f.eps_max_opt->count() > 0 || f.b_noise_opt->count() > 0;
  if (f.fit_opt->count() > 0 && given)
    throw ConfigError("give --fit SWEEP.jsonl or --eps-max and --b-noise, not both");
  if (f.fit_opt->count() > 0) {
    const scaling::SweepFile sweep = scaling::read_sweep_file(f.fit);
    check_sweep_setup(sweep, f.fit, optimizer, seq);
    const scaling::SweepAnalysis a = scaling::analyse_sweep(sweep, f.fit, {});
    o.law_params = scaling::law_params_from_sweep(a, o.law);
    if (const std::string caveats = scaling::fit_caveats(a, o.law_params.b_noise); !caveats.empty())
      std::cerr << "memo: warning: the fit of " << f.fit << " is uncertain: " << caveats << "\n";
  } else if (f.eps_max_opt->count() > 0 && f.b_noise_opt->count() > 0) {
    o.law_params = {f.eps_max, f.b_noise};
  } else {
    throw ConfigError(str("--batch-schedule noise sets the lr by the ", scaling::law_name(o.law),
                          " law: give --eps-max X and --b-noise TOKENS, or --fit SWEEP.jsonl"));
  }
  return o;
}

}  // namespace memo::cli
