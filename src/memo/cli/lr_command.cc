// memo lr: the learning rate a law recommends for a batch size (tokens), and the batch size with
// the highest optimal lr: B_noise for the surge law, none for the SGD law (it rises
// monotonically). The law's parameters come from a sweep file (fitted as memo fit does) or from
// --b-noise and --eps-max.
#include <cstdio>
#include <iostream>
#include <memory>

#include "memo/cli/commands.h"
#include "memo/core/error.h"
#include "memo/scaling/sweep_analysis.h"

namespace memo::cli {

void add_lr_command(CLI::App& app) {
  struct Options {
    double batch = 0, b_noise = 0, eps_max = 0;
    std::string fit, law = "surge";
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("lr", "Recommended learning rate for a batch size (surge or SGD law)");
  cmd->add_option("--batch", o->batch, "Batch size in tokens per step")->required();
  CLI::Option* fit = cmd->add_option("--fit", o->fit, "Sweep file to fit the law to (as memo fit)");
  CLI::Option* bn = cmd->add_option("--b-noise", o->b_noise, "B_noise in tokens");
  CLI::Option* em = cmd->add_option("--eps-max", o->eps_max, "eps_max (the law's lr scale)");
  fit->excludes(bn)->excludes(em);
  cmd->add_option("--law", o->law, "surge (Adam family, sign-like) or sgd")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o, fit, bn, em] {
    if (o->law != "surge" && o->law != "sgd")
      throw ConfigError(str("--law ", o->law, " is not surge or sgd"));
    const scaling::Law law = o->law == "surge" ? scaling::Law::kSurge : scaling::Law::kSgd;
    if (!(o->batch > 0)) throw ConfigError(str("--batch ", o->batch, " must be a positive number of tokens"));
    std::vector<double> params;
    if (fit->count() > 0) {
      const scaling::SweepAnalysis a = scaling::analyse_sweep(scaling::read_sweep_file(o->fit), o->fit, {});
      for (const scaling::LawFit& f : a.laws.fits)
        if (f.law == law) params = f.params;
    } else {
      if (bn->count() == 0 || em->count() == 0)
        throw ConfigError("give --fit FILE, or both --b-noise and --eps-max");
      if (!(o->b_noise > 0) || !(o->eps_max > 0))
        throw ConfigError(str("--b-noise ", o->b_noise, " and --eps-max ", o->eps_max, " must be positive"));
      params = {o->eps_max, o->b_noise};
    }
    const double lr = scaling::law_lr(law, params, o->batch);
    const std::optional<double> peak = scaling::law_peak_batch(law, params);
    if (o->json) {
      std::cout << nlohmann::json{{"lr", lr}, {"peak_batch", peak ? nlohmann::json(*peak) : nlohmann::json()},
                                  {"batch", o->batch}, {"law", o->law}, {"eps_max", params[0]},
                                  {"b_noise", params[1]}}.dump()
                << "\n";
      return;
    }
    char line[200];
    std::snprintf(line, sizeof line, "lr %.4g at batch %.0f tokens (%s law, eps_max %.4g, B_noise %.4g tokens)\n",
                  lr, o->batch, o->law.c_str(), params[0], params[1]);
    std::cout << line;
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
