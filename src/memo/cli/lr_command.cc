// memo lr: the learning rate a law recommends for a batch size (tokens), and the batch size with
// the highest optimal lr: B_noise for the surge law, none for the SGD law (it rises
// monotonically). The law's parameters come from a sweep file (fitted as memo fit does) or from
// --b-noise and --eps-max; with --from-log, B_noise is K times the run's own late, smoothed noise
// scale B_simple (scaling/run_log.h) and eps_max is given or, from a sweep, Eq. 23 / 24 at it.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "memo/cli/commands.h"
#include "memo/core/error.h"
#include "memo/scaling/batch_schedule.h"
#include "memo/scaling/run_log.h"
#include "memo/scaling/sweep_analysis.h"

namespace memo::cli {

namespace {

std::vector<scaling::OptimalLr> sweep_optima(const scaling::SweepAnalysis& a) {
  std::vector<scaling::OptimalLr> points;
  for (const scaling::BatchSummary& b : a.batches) points.push_back(b.optimum);
  return points;
}

}  // namespace

void add_lr_command(CLI::App& app) {
  struct Options {
    double batch = 0, b_noise = 0, eps_max = 0, noise_multiple = 1.0;
    std::string fit, from_log, law = "surge";
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("lr", "Recommended learning rate for a batch size (surge or SGD law)");
  cmd->add_option("--batch", o->batch, "Batch size in tokens per step")->required();
  CLI::Option* fit = cmd->add_option("--fit", o->fit, "Sweep file to fit the law to (as memo fit)");
  CLI::Option* bn = cmd->add_option("--b-noise", o->b_noise, "B_noise in tokens");
  CLI::Option* em = cmd->add_option("--eps-max", o->eps_max, "eps_max (the law's lr scale)");
  CLI::Option* log = cmd->add_option(
      "--from-log", o->from_log,
      "JSON log of memo train --log: B_noise = --noise-multiple x its last gns_b_simple (the "
      "estimator's smoothed value); eps_max from --eps-max, or Eq. 23/24 over --fit's optimal lrs");
  CLI::Option* k =
      cmd->add_option(
             "--noise-multiple", o->noise_multiple,
             "With --from-log: B_noise / B_simple (B_simple tracks B_noise only up to a factor)")
          ->capture_default_str();
  fit->excludes(bn)->excludes(em);
  log->excludes(bn);
  k->needs(log);
  cmd->add_option("--law", o->law, "surge (Adam family, sign-like) or sgd")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o, fit, bn, em, log] {
    if (o->law != "surge" && o->law != "sgd")
      throw ConfigError(str("--law ", o->law, " is not surge or sgd"));
    const scaling::Law law = o->law == "surge" ? scaling::Law::kSurge : scaling::Law::kSgd;
    if (!(o->batch > 0 && std::isfinite(o->batch)))
      throw ConfigError(str("--batch ", o->batch, " must be a positive number of tokens"));
    std::vector<double> params;
    std::optional<scaling::LoggedNoiseScale> logged;
    if (log->count() > 0) {
      if (!(o->noise_multiple > 0 && std::isfinite(o->noise_multiple)))
        throw ConfigError(str("--noise-multiple ", o->noise_multiple, " must be positive"));
      if (fit->count() == 0 && em->count() == 0)
        throw ConfigError(
            "--from-log gives B_noise; give --eps-max X, or --fit SWEEP.jsonl to fit it");
      if (em->count() > 0 && !(o->eps_max > 0))
        throw ConfigError(str("--eps-max ", o->eps_max, " must be positive"));
      logged = scaling::late_noise_scale(o->from_log);
      const double b_noise = o->noise_multiple * logged->b_simple;
      double eps_max = o->eps_max;
      if (fit->count() > 0) {
        const scaling::SweepAnalysis a =
            scaling::analyse_sweep(scaling::read_sweep_file(o->fit), o->fit, {});
        eps_max = law == scaling::Law::kSurge
                      ? scaling::eps_max_surge(sweep_optima(a), b_noise)
                      : scaling::eps_max_power(sweep_optima(a), b_noise, 1.0);
      }
      params = {eps_max, b_noise};
    } else if (fit->count() > 0) {
      const scaling::SweepAnalysis a =
          scaling::analyse_sweep(scaling::read_sweep_file(o->fit), o->fit, {});
      const scaling::LawParams fitted = scaling::law_params_from_sweep(a, law);
      params = {fitted.eps_max, fitted.b_noise};
    } else {
      if (bn->count() == 0 || em->count() == 0)
        throw ConfigError(
            "give --fit FILE, or both --b-noise and --eps-max, or --from-log RUN.jsonl");
      if (!(o->b_noise > 0) || !(o->eps_max > 0))
        throw ConfigError(
            str("--b-noise ", o->b_noise, " and --eps-max ", o->eps_max, " must be positive"));
      params = {o->eps_max, o->b_noise};
    }
    const double lr = scaling::law_lr(law, params, o->batch);
    const std::optional<double> peak = scaling::law_peak_batch(law, params);
    if (o->json) {
      nlohmann::json j{{"lr", lr},
                       {"peak_batch", peak ? nlohmann::json(*peak) : nlohmann::json()},
                       {"batch", o->batch},
                       {"law", o->law},
                       {"eps_max", params[0]},
                       {"b_noise", params[1]}};
      if (logged)
        j.update({{"b_simple", logged->b_simple},
                  {"b_simple_step", logged->step},
                  {"noise_multiple", o->noise_multiple},
                  {"log", o->from_log},
                  {"eps_max_from", fit->count() > 0 ? "fit" : "given"}});
      std::cout << j.dump() << "\n";
      return;
    }
    char line[300];
    std::snprintf(line, sizeof line,
                  "lr %.4g at batch %.0f tokens (%s law, eps_max %.4g, B_noise %.4g tokens)\n", lr,
                  o->batch, o->law.c_str(), params[0], params[1]);
    std::cout << line;
    if (logged) {
      std::snprintf(
          line, sizeof line,
          "B_noise = %.4g x B_simple %.4g tokens: the estimator's smoothed value (ratio of "
          "EMAs) at step %lld of %s, the last of %lld logged; eps_max %s\n",
          o->noise_multiple, logged->b_simple, static_cast<long long>(logged->step),
          o->from_log.c_str(), static_cast<long long>(logged->with_value),
          fit->count() > 0
              ? (o->law == "surge" ? "from the sweep by Eq. 23 at this B_noise"
                                   : "from the sweep by Eq. 24 (alpha 1) at this B_noise")
              : "given");
      std::cout << line;
    }
    if (peak) {
      std::snprintf(line, sizeof line, "highest optimal lr %.4g at batch %.0f tokens (B_noise)\n",
                    scaling::law_lr(law, params, *peak), *peak);
      std::cout << line;
    } else {
      std::cout << "no peak: the sgd law rises monotonically towards eps_max with the batch\n";
    }
  });
}

}  // namespace memo::cli
