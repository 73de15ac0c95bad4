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

struct LrOptions {
  double batch = 0, b_noise = 0, eps_max = 0, noise_multiple = 1.0;
  std::string fit, from_log, law = "surge";
  bool json = false;
};

// The flags whose presence, not only their value, picks where the law's parameters come from.
struct LawSourceFlags {
  CLI::Option* fit;
  CLI::Option* b_noise;
  CLI::Option* eps_max;
  CLI::Option* from_log;
};

// The law's parameters {eps_max, B_noise}; `logged` is the run's noise scale when --from-log gave
// B_noise.
struct LawChoice {
  std::vector<double> params;
  std::optional<scaling::LoggedNoiseScale> logged;
};

std::vector<scaling::OptimalLr> sweep_optima(const scaling::SweepAnalysis& a) {
  std::vector<scaling::OptimalLr> points;
  for (const scaling::BatchSummary& b : a.batches) points.push_back(b.optimum);
  return points;
}

LawSourceFlags add_law_source_flags(CLI::App* cmd, LrOptions& o) {
  CLI::Option* fit = cmd->add_option("--fit", o.fit, "Sweep file to fit the law to (as memo fit)");
  CLI::Option* bn = cmd->add_option("--b-noise", o.b_noise, "B_noise in tokens");
  CLI::Option* em = cmd->add_option("--eps-max", o.eps_max, "eps_max (the law's lr scale)");
  CLI::Option* log = cmd->add_option(
      "--from-log", o.from_log,
      "JSON log of memo train --log: B_noise = --noise-multiple x its last gns_b_simple (the "
      "estimator's smoothed value); eps_max from --eps-max, or Eq. 23/24 over --fit's optimal lrs");
  CLI::Option* k =
      cmd->add_option(
             "--noise-multiple", o.noise_multiple,
             "With --from-log: B_noise / B_simple (B_simple tracks B_noise only up to a factor)")
          ->capture_default_str();
  fit->excludes(bn)->excludes(em);
  log->excludes(bn);
  k->needs(log);
  return {fit, bn, em, log};
}

// --from-log: B_noise from the run's noise scale, eps_max given or from the sweep at it.
LawChoice params_from_log(const LrOptions& o, const LawSourceFlags& f, scaling::Law law) {
  if (!(o.noise_multiple > 0 && std::isfinite(o.noise_multiple)))
    throw ConfigError(str("--noise-multiple ", o.noise_multiple, " must be positive"));
  if (f.fit->count() == 0 && f.eps_max->count() == 0)
    throw ConfigError("--from-log gives B_noise; give --eps-max X, or --fit SWEEP.jsonl to fit it");
  if (f.eps_max->count() > 0 && !(o.eps_max > 0 && std::isfinite(o.eps_max)))
    throw ConfigError(str("--eps-max ", o.eps_max, " must be positive and finite"));
  LawChoice p;
  p.logged = scaling::late_noise_scale(o.from_log);
  const double b_noise = o.noise_multiple * p.logged->b_simple;
  double eps_max = o.eps_max;
  if (f.fit->count() > 0) {
    const scaling::SweepAnalysis a =
        scaling::analyse_sweep(scaling::read_sweep_file(o.fit), o.fit, {});
    eps_max = law == scaling::Law::kSurge ? scaling::eps_max_surge(sweep_optima(a), b_noise)
                                          : scaling::eps_max_power(sweep_optima(a), b_noise, 1.0);
  }
  p.params = {eps_max, b_noise};
  return p;
}

LawChoice params_from_fit(const LrOptions& o, scaling::Law law) {
  const scaling::SweepAnalysis a =
      scaling::analyse_sweep(scaling::read_sweep_file(o.fit), o.fit, {});
  const scaling::LawParams fitted = scaling::law_params_from_sweep(a, law);
  if (const std::string caveats = scaling::fit_caveats(a, fitted.b_noise); !caveats.empty())
    std::cerr << "memo: warning: the fit of " << o.fit << " is uncertain: " << caveats << "\n";
  return {{fitted.eps_max, fitted.b_noise}, std::nullopt};
}

LawChoice params_given(const LrOptions& o, const LawSourceFlags& f) {
  if (f.b_noise->count() == 0 || f.eps_max->count() == 0)
    throw ConfigError("give --fit FILE, or both --b-noise and --eps-max, or --from-log RUN.jsonl");
  for (const auto& [flag, v] : {std::pair{"--b-noise", o.b_noise}, {"--eps-max", o.eps_max}})
    if (!(v > 0 && std::isfinite(v)))
      throw ConfigError(str(flag, " ", v, " must be positive and finite"));
  return {{o.eps_max, o.b_noise}, std::nullopt};
}

void print_lr_json(const LrOptions& o, const LawSourceFlags& f, const LawChoice& p, double lr,
                   std::optional<double> peak) {
  nlohmann::json j{{"lr", lr},
                   {"peak_batch", peak ? nlohmann::json(*peak) : nlohmann::json()},
                   {"batch", o.batch},
                   {"law", o.law},
                   {"eps_max", p.params[0]},
                   {"b_noise", p.params[1]}};
  if (p.logged)
    j.update({{"b_simple", p.logged->b_simple},
              {"b_simple_step", p.logged->step},
              {"noise_multiple", o.noise_multiple},
              {"log", o.from_log},
              {"eps_max_from", f.fit->count() > 0 ? "fit" : "given"}});
  std::cout << j.dump() << "\n";
}

void print_lr_text(const LrOptions& o, const LawSourceFlags& f, scaling::Law law,
                   const LawChoice& p, double lr, std::optional<double> peak) {
  char line[300];
  std::snprintf(line, sizeof line,
                "lr %.4g at batch %.10g tokens (%s law, eps_max %.4g, B_noise %.4g tokens)\n", lr,
                o.batch, o.law.c_str(), p.params[0], p.params[1]);
  std::cout << line;
  if (p.logged) {
    std::snprintf(line, sizeof line,
                  "B_noise = %.4g x B_simple %.4g tokens: the estimator's smoothed value (ratio of "
                  "EMAs) at step %lld of %s, the last of %lld logged; eps_max %s\n",
                  o.noise_multiple, p.logged->b_simple, static_cast<long long>(p.logged->step),
                  o.from_log.c_str(), static_cast<long long>(p.logged->with_value),
                  f.fit->count() > 0
                      ? (o.law == "surge" ? "from the sweep by Eq. 23 at this B_noise"
                                          : "from the sweep by Eq. 24 (alpha 1) at this B_noise")
                      : "given");
    std::cout << line;
  }
  if (peak) {
    std::snprintf(line, sizeof line, "highest optimal lr %.4g at batch %.10g tokens (B_noise)\n",
                  scaling::law_lr(law, p.params, *peak), *peak);
    std::cout << line;
  } else {
    std::cout << "no peak: the sgd law rises monotonically towards eps_max with the batch\n";
  }
}

void run_lr(const LrOptions& o, const LawSourceFlags& f) {
  if (o.law != "surge" && o.law != "sgd")
    throw ConfigError(str("--law ", o.law, " is not surge or sgd"));
  const scaling::Law law = o.law == "surge" ? scaling::Law::kSurge : scaling::Law::kSgd;
  if (!(o.batch > 0 && std::isfinite(o.batch)))
    throw ConfigError(str("--batch ", o.batch, " must be a positive number of tokens"));
  const LawChoice p = f.from_log->count() > 0 ? params_from_log(o, f, law)
                      : f.fit->count() > 0    ? params_from_fit(o, law)
                                              : params_given(o, f);
  const double lr = scaling::law_lr(law, p.params, o.batch);
  const std::optional<double> peak = scaling::law_peak_batch(law, p.params);
  // checked before anything is printed: values whose law underflows or overflows are refused
  for (const double v : {lr, peak ? scaling::law_lr(law, p.params, *peak) : lr})
    if (!(v > 0 && std::isfinite(v)))
      throw ConfigError(str("the ", o.law, " law with eps_max ", p.params[0], " and B_noise ",
                            p.params[1], " gives lr ", v, " at batch ", o.batch,
                            " tokens: not a learning rate; check the values"));
  if (o.json)
    print_lr_json(o, f, p, lr, peak);
  else
    print_lr_text(o, f, law, p, lr, peak);
}

}  // namespace

void add_lr_command(CLI::App& app) {
  auto o = std::make_shared<LrOptions>();
  CLI::App* cmd =
      app.add_subcommand("lr", "Recommended learning rate for a batch size (surge or SGD law)");
  cmd->add_option("--batch", o->batch, "Batch size in tokens per step")->required();
  const LawSourceFlags flags = add_law_source_flags(cmd, *o);
  cmd->add_option("--law", o->law, "surge (Adam family, sign-like) or sgd")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o, flags] { run_lr(*o, flags); });
}

}  // namespace memo::cli
