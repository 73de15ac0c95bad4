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
  double confidence = 0.95;
};

struct BatchSummary {
  OptimalLr optimum;
  std::optional<double> b_simple;       // mean gns_b_simple over the batch's finite runs (tokens)
  std::optional<int64_t> target_steps;  // S of the best grid lr's run (target-loss sweeps)
  std::optional<int64_t> target_tokens;
};

struct SweepAnalysis {
  std::string path;
  std::string setting;  // "optimizer {hyperparameters}"
  std::string metric;
  int64_t runs = 0;
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
std::string to_text(const SweepAnalysis& analysis);

}  // namespace memo::scaling
