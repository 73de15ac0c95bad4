// memo fit: the scaling analysis of sweep files (scaling/sweep_analysis.h): per batch size the
// optimal lr, the surge, SGD and power-law fits with intervals and residuals, the verdict, and
// for target-loss sweeps B_noise (Eq. 22) and eps_max (Eq. 23); --plot draws them (several files
// share one plot), --json prints one object per file (an array for several).
#include <iostream>
#include <memory>

#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/core/error.h"
#include "memo/io/atomic_file.h"
#include "memo/scaling/sweep_plot.h"

namespace memo::cli {

void add_fit_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> files;
    std::string plot, metric;
    int64_t at_tokens = 0;
    std::vector<double> target_levels;
    double confidence = 0.95;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("fit", "Fit the surge, SGD and power lr laws to sweep files");
  cmd->add_option("files", o->files,
                  "Sweep files (JSON lines from memo sweep), one optimiser setting each")
      ->required();
  cmd->add_option("--plot", o->plot, "Write an SVG of the optimal lrs and fitted laws (log-log)");
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->add_option("--metric", o->metric,
                  "val_loss, final_loss, best_loss or loss_reduction (default: loss_reduction for "
                  "target-loss sweeps, else val_loss when present)")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.empty() ? "unknown metric ''; valid: val_loss, final_loss, best_loss, "
                               "loss_reduction"
                             : "";
          },
          "", "metric"));
  cmd->add_option(
         "--at-tokens", o->at_tokens,
         "Judge runs by their smoothed training loss at this many tokens (from the curve) instead")
      ->check(number_check(true));
  cmd->add_option("--target-loss", o->target_levels,
                  "Target-loss sweeps with several levels: judge at these (comma-separated; one "
                  "analysis per file and level); default: the lowest level")
      ->delimiter(',');
  cmd->add_option("--confidence", o->confidence, "Confidence level of the intervals")
      ->capture_default_str();
  cmd->callback([o] {
    scaling::SweepAnalysisOptions options;
    options.metric = o->metric;
    if (o->at_tokens > 0) options.at_tokens = o->at_tokens;
    options.confidence = o->confidence;
    std::vector<scaling::SweepAnalysis> all;
    for (const std::string& f : o->files) {
      const scaling::SweepFile file = scaling::read_sweep_file(f);
      if (o->target_levels.empty()) all.push_back(scaling::analyse_sweep(file, f, options));
      for (double level : o->target_levels) {
        options.target_level = level;
        all.push_back(scaling::analyse_sweep(file, f, options));
      }
    }
    if (o->json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& a : all) j.push_back(scaling::to_json(a));
      std::cout << (all.size() == 1 ? j[0] : j).dump() << "\n";
    } else {
      for (const auto& a : all) std::cout << scaling::to_text(a) << (all.size() > 1 ? "\n" : "");
    }
    if (!o->plot.empty()) {
      write_file_atomic(o->plot, scaling::sweep_svg(all, "optimal learning rate vs batch size"));
      if (!o->json) std::cout << "plot: " << o->plot << "\n";
    }
  });
}

}  // namespace memo::cli
