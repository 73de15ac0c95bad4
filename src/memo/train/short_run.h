// One short training run from scratch for learning-rate x batch-size sweeps (memo sweep): the
// trainer's step (micro-batch accumulation, optional clipping, any optimiser of optim/factory.h,
// the noise-scale probe) without checkpoints, logs or progress lines, on data loaded once by the
// caller. Either a fixed budget of steps, or the surge paper's protocol (Section 3.2): train until
// the smoothed training loss reaches a target, record steps S and tokens E, then a fixed number of
// extra steps and the loss reduction over them. Deterministic for fixed options.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/data/token_data.h"
#include "memo/model/config.h"
#include "memo/train/optimizer_setup.h"

namespace memo {

struct ShortRunOptions {
  int64_t seq = 64;            // tokens per sequence
  int64_t batch_tokens = 512;  // tokens per optimiser step: a multiple of seq
  int64_t micro_batch = 0;     // sequences per forward/backward; 0: the whole batch
  int64_t max_steps = 100;     // the budget (fixed-budget runs) or the cap (target runs)
  double lr = 1e-3;
  int64_t warmup = 0;         // linear warm-up steps
  double min_lr_ratio = 1.0;  // cosine decay to lr * this; 1: constant after warm-up
  double clip = 0.0;          // global gradient-norm clipping; 0: off (the surge laws assume none)
  OptimizerChoice optimizer;
  uint64_t seed = 1234;  // weight init and data windows
  bool gns = true;       // noise-scale probe when there are >= 2 micro-batches
  // Note [Smoothed training loss]
  // The training loss of one step is noisy at small batches. A run's loss at step s is the mean
  // of the losses of steps max(1, s - loss_window + 1) .. s: a window mean, not an EMA, so it has
  // no start-up bias and no memory beyond the window. The target is reached at the first step S
  // whose window holds loss_window steps and whose mean is <= target_loss; the loss reduction is
  // smoothed(S) - smoothed(S + extra_steps) (use extra_steps >= loss_window for disjoint windows).
  // Several targets (descending) judge one run at several loss levels: each level's S and loss
  // reduction are what a run with that single target would record (the run is the same up to
  // there), and the run stops extra_steps after the lowest.
  int64_t loss_window = 10;
  std::vector<double> target_losses;  // empty: a fixed budget
  int64_t extra_steps = 50;
  int64_t val_windows = 64;   // sequential windows of the validation data for val_loss; 0: none
  int64_t curve_points = 32;  // smoothed-loss samples kept, at evenly spaced steps
};

struct CurvePoint {
  int64_t step = 0;
  int64_t tokens = 0;
  double loss = 0.0;  // smoothed training loss at `step`
};

struct ShortRunResult {
  int64_t steps = 0;               // steps taken
  int64_t tokens = 0;              // steps * batch_tokens
  bool diverged = false;           // non-finite loss, or smoothed loss above the first step's + 2
  double final_loss = 0.0;         // smoothed loss at the last step (+inf when diverged)
  double best_loss = 0.0;          // lowest smoothed loss seen
  std::optional<double> val_loss;  // mean loss over the validation windows (not when diverged)
  std::vector<CurvePoint> curve;
  std::optional<double> gns_b_simple;  // the estimator's B_simple (tokens) at the end
  struct TargetLevel {
    double target = 0.0;
    std::optional<int64_t> steps;          // S: the step the target was reached
    std::optional<double> loss_reduction;  // over extra_steps after S; nullopt: the cap came first
    std::optional<double> b_simple_at_target;  // the estimator's B_simple at step S (tokens)
  };
  std::vector<TargetLevel> targets;  // one per options.target_losses, in its order
  double seconds = 0.0;
};

// ConfigError naming the first option run_short would refuse (a batch that is not a multiple of
// seq x micro_batch, an lr that is not a positive number, a target loss <= 0...).
void check_short_run(const ShortRunOptions& o);

// On `backend`; val may be null (no validation). Throws ConfigError for inconsistent options.
ShortRunResult run_short(Backend& backend, const ModelConfig& config, const TokenData& train,
                         const TokenData* val, const ShortRunOptions& options);

}  // namespace memo
