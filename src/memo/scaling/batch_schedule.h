// The noise-driven batch-size schedule (`--batch-schedule noise`, issue 13): a controller that
// grows a step's batch (in whole micro-batches, never more memory) to track K times the online
// noise scale B_simple, only ever upwards, and sets each step's learning rate from the surge or
// SGD law for the current batch, with warm-up and decay measured in tokens. Pure and
// deterministic: no I/O, no clock; its state round-trips through JSON bit for bit. Not here:
// measuring B_simple (noise_scale.h, train/grad_noise.h) or running the steps (the trainer).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "memo/scaling/laws.h"
#include "memo/scaling/sweep_analysis.h"

namespace memo::scaling {

// Warm-up and cosine decay in tokens, so that a growing batch does not shorten them. For a
// constant batch of b tokens, lr(peak, s b) equals memo::LrSchedule{peak, peak min_lr_ratio,
// warmup_steps, total_steps}.at(s) when warmup_tokens = warmup_steps b and total_tokens =
// total_steps b: the same expressions over the same real ratios (each a correctly rounded
// quotient), so equal up to where the compiler fuses a * b + c (a few ulp; tested).
struct TokenLrSchedule {
  int64_t warmup_tokens = 0;  // linear warm-up from 0 to the peak over this many tokens
  int64_t total_tokens = 1;   // cosine decay reaches peak * min_lr_ratio here
  double min_lr_ratio = 0.1;  // in [0, 1]
  // The lr of the step that ends with tokens_end tokens seen in total (counted from the start of
  // the run, this step's included).
  double lr(double peak_lr, int64_t tokens_end) const;
};

// Which law sets the lr: the SGD law for sgd, the surge law for every other optimiser (the Adam
// family, signsgd and lion are sign-like; adagrad, rmsprop and adafactor are treated as the Adam
// family, as their updates are normalised per coordinate too).
Law law_for_optimizer(const std::string& optimizer_name);

// eps_max and B_noise (tokens) of the surge or SGD law as fitted to a sweep (memo fit's fit,
// fit.h Note [Law fits]). Throws ConfigError for another law, when the sweep has no such fit, or
// when the fit puts B_noise at 0 (the edge of its range: the sweep does not pin it down, and no lr
// follows from it).
LawParams law_params_from_sweep(const SweepAnalysis& analysis, Law law);

struct BatchScheduleOptions {
  int64_t seq = 0;          // tokens per sequence (--seq)
  int64_t micro_batch = 0;  // sequences per forward/backward (--micro-batch): the growth unit
  int64_t batch = 0;        // sequences per step at the start (--batch): >= 2 micro-batches, so
                            // that B_simple can be measured from the first step
  int64_t max_batch = 0;    // cap in sequences (--max-batch): a multiple of micro_batch, >= batch
  double noise_multiple = 1.0;  // K (--noise-multiple): the batch tracks K B_simple, in (0, 1e6]
  // Hysteresis (--noise-hysteresis, in [0, 10]): grow only while K B_simple >= (1 + h) times the
  // current batch in tokens. A new batch is at most K B_simple, so the next change needs K
  // B_simple to pass (1 + h) times it: fluctuations around the value that sized it do not.
  double hysteresis = 0.25;
  int64_t patience = 10;  // --noise-patience, >= 1: consecutive steps above the band
  // --noise-min-steps, >= 1: steps with a B_simple before any change (the EMAs' first values are
  // few-step averages: noisy, most of all while the batch is far below B_simple)
  int64_t min_observations = 50;
  Law law = Law::kSurge;  // kSurge or kSgd (--law; law_for_optimizer by default)
  LawParams law_params;   // eps_max and B_noise (tokens): given, or fitted from a sweep
  TokenLrSchedule schedule;
};

// Throws ConfigError with one line naming the flag, its value and the allowed range.
void check_options(const BatchScheduleOptions& options);

// The options a checkpoint pins, so that a resumed run uses exactly these (doubles as hex floats,
// like the state); from_json throws FormatError naming a missing or mistyped field.
nlohmann::json to_json(const BatchScheduleOptions& options);
BatchScheduleOptions batch_schedule_options_from_json(const nlohmann::json& j);

// What a checkpoint saves; from_json(to_json(s)) == s bit for bit (doubles as hex floats).
struct BatchScheduleState {
  int64_t steps = 0;                    // optimiser steps done
  int64_t tokens = 0;                   // tokens seen by those steps
  int64_t batch = 0;                    // sequences per step from the next step on
  int64_t observations = 0;             // steps that reported a B_simple
  int64_t streak = 0;                   // consecutive steps with K B_simple above the band
  double streak_min_b_simple = 0.0;     // the smallest B_simple (tokens) of the streak
  std::optional<double> last_b_simple;  // the latest B_simple (tokens); none before the first
  bool operator==(const BatchScheduleState&) const = default;
};
nlohmann::json to_json(const BatchScheduleState& state);
// Throws FormatError naming the field for a missing, mistyped or inexact value.
BatchScheduleState batch_schedule_state_from_json(const nlohmann::json& j);

struct StepPlan {     // what the trainer runs as step `step`
  int64_t step = 0;   // 1-based
  int64_t batch = 0;  // sequences
  int64_t micro_batches = 0;
  int64_t batch_tokens = 0;
  int64_t tokens_end = 0;  // tokens seen once this step is done
  double lr_law = 0.0;     // the law's lr for batch_tokens: the peak warm-up and decay scale
  double lr = 0.0;         // this step's lr
};

struct BatchChange {      // one log record: the batch grew after `step`
  int64_t step = 0;       // the last step at the old batch; the new one applies from step + 1
  int64_t tokens = 0;     // tokens seen by then
  int64_t old_batch = 0;  // sequences
  int64_t batch = 0;      // sequences
  int64_t batch_tokens = 0;
  double lr_law = 0.0;             // the law's lr for the new batch (before warm-up and decay)
  double b_simple = 0.0;           // the B_simple (tokens) it was sized by: the streak's smallest
  nlohmann::json to_json() const;  // {"event": "batch_change", step, tokens, batch, ..., b_simple}
};

// Note [Noise batch schedule]
// The law (DESIGN.md section 3; surge paper arXiv 2405.14578): the optimal lr of batch B is
//   sign-like (Adam family): eps_opt(B) = eps_max / (0.5 (sqrt(B_noise/B) + sqrt(B/B_noise)))
//   (surge Eq. 13 with Theorem 3's B_noise, Eq. 14, and eps_max, Eq. 16), and
//   SGD: eps_opt(B) = eps_max / (1 + B_noise/B) (surge Eq. 1 = McCandlish et al. 2018 Eq. 2.6).
// The loss gain per step keeps the SGD form, so B_noise is also the critical batch of the steps
// vs examples trade-off (S/S_min - 1)(E/E_min - 1) = 1 (surge Eq. 20): past it, a bigger batch
// buys few steps. McCandlish's B_simple = tr(Sigma)/|G|^2 (their Eq. 2.8) tracks that batch up
// to a factor, and grows as the loss falls; K calibrates the factor (from one sweep: K = fitted
// B_noise / the sweep's B_simple).
// The controller, per step, after the noise-scale estimator's update (its ratio of EMAs is the
// smoothed B_simple, in tokens):
//   1. if B_simple is known, finite and positive and min_observations steps reported one, the step
//      is "above the band" when K B_simple >= (1 + h) batch_tokens; otherwise the streak restarts;
//   2. after `patience` consecutive steps above the band, the new batch is the largest multiple of
//      micro_batch with tokens <= K min(streak's B_simple), capped at max_batch, taken if larger;
//      if it is not larger (the band lies within a micro-batch of the batch), the streak restarts,
//      so the next decision takes the minimum of the next `patience` steps.
// So the batch never falls (monotone), never exceeds the cap or K times any B_simple that sized
// it, and changes only when B_simple rose by (1 + h) over what sized the current batch, for
// `patience` steps: a stationary B_simple changes the batch a bounded number of times, it does
// not oscillate. The lr of a step is the law's for its batch in tokens, times warm-up and decay
// at the tokens seen (TokenLrSchedule). The state is integers and doubles updated in a fixed
// order, so a run restored from to_json() continues bit for bit.
class BatchSchedule {
 public:
  explicit BatchSchedule(const BatchScheduleOptions& options);  // throws ConfigError
  // Resume: throws FormatError when the state does not fit the options (batch off the grid).
  BatchSchedule(const BatchScheduleOptions& options, const BatchScheduleState& state);

  StepPlan next() const;  // the step to run now
  // After that step ran: b_simple is the estimator's value after this step's update (none when
  // unknown). Returns the change when the batch grows for the next step.
  std::optional<BatchChange> observe(std::optional<double> b_simple);
  bool done() const { return state_.tokens >= options_.schedule.total_tokens; }

  const BatchScheduleState& state() const { return state_; }
  const BatchScheduleOptions& options() const { return options_; }
  double law_lr_for(int64_t batch_tokens) const;  // the law's lr (no warm-up or decay)

 private:
  BatchScheduleOptions options_;
  BatchScheduleState state_;
};

}  // namespace memo::scaling
