// What `memo fit` reports about one sweep file: per batch size the optimal lr, the three law fits
// with intervals and the verdict (fit.h), the measured B_simple, and for target-loss sweeps the
// paper's B_noise from steps and tokens to the target (Eq. 22) and eps_max (Eq. 23, 24). Pure:
// the file is read by the caller (sweep_file.h), the SVG is drawn by sweep_plot.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memo/scaling/fit.h"
#include "memo/scaling/sweep_file.h"

namespace memo::scaling {

struct SweepAnalysisOptions {
  // The loss a run is judged by: "val_loss", "final_loss" or "best_loss" (lowest wins), or
  // "loss_reduction" (largest wins: the paper's criterion for target-loss runs). Empty: the
  // paper's for target-loss sweeps, else val_loss when the runs have it, else final_loss.
  std::string metric;
  std::optional<int64_t> at_tokens;  // judge by the curve's smoothed loss nearest this many tokens
  // Target-loss sweeps with several levels (memo sweep --target-loss A,B): the level to judge at,
  // from each run's "targets"; default: the lowest (the one that ended the runs).
  std::optional<double> target_level;
  double confidence = 0.95;
};

struct BatchSummary {
  OptimalLr optimum;
  // mean B_simple over the batch's finite runs (tokens): at the target for target-loss sweeps
  // that recorded it (SweepAnalysis::b_simple_at_target), else at the end of the runs
  std::optional<double> b_simple;
  // target-loss sweeps: S and E = B S of the best grid lr (by the mean over seeds), averaged over
  // its seeds
  std::optional<double> target_steps;
  std::optional<double> target_tokens;
  std::vector<double> seed_lrs;  // with several seeds: each seed's own optimum (ascending)
};

struct SweepAnalysis {
  std::string path;
  std::string series;   // the plot's name: the file's stem, and the level or tokens judged at
  std::string setting;  // "optimizer {hyperparameters}"
  std::string metric;
  std::optional<double> target_level;  // the level judged at (target-loss sweeps)
  int64_t runs = 0;
  int seeds = 1;                      // distinct seeds in the file
  bool b_simple_at_target = false;    // BatchSummary::b_simple is at the target, not at the end
  std::vector<SweepRun> grid;         // every run as fitted (loss = the metric, lower is better)
  std::vector<BatchSummary> batches;  // ascending batch size
  LawComparison laws;
  // target-loss sweeps: Eq. 22 over (S, E) of each batch's best run, then Eq. 23 / 24
  std::optional<TargetLossFit> target;
  std::optional<double> eps_max_surge;  // Eq. 23 at target->b_noise
  std::optional<double> eps_max_sgd;    // Eq. 24, alpha = 1
  std::string target_note;              // why there is no target fit, when there is none
};

// Throws FormatError (mixed optimiser settings, no usable runs, unknown metric) and ConfigError
// (too few batch sizes for a law, from fit.h).
SweepAnalysis analyse_sweep(const SweepFile& file, const std::string& path,
                            const SweepAnalysisOptions& options);

nlohmann::json to_json(const SweepAnalysis& analysis);

// Why a law fitted to `analysis` with this B_noise (tokens) is to be taken with care, in one
// sentence ("" when nothing stands out): batches whose best lr lay at the lr grid's edge (a bound,
// not an optimum), or a B_noise outside the batch sizes swept (an extrapolation).
std::string fit_caveats(const SweepAnalysis& analysis, double b_noise);
std::string to_text(const SweepAnalysis& analysis);

}  // namespace memo::scaling
