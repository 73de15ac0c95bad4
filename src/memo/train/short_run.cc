#include "memo/train/short_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>

#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/data/sampler.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/parallel/self_communicator.h"
#include "memo/train/evaluate.h"
#include "memo/train/grad_noise.h"
#include "memo/train/schedule.h"
#include "memo/train/step.h"

namespace memo {
void check_short_run(const ShortRunOptions& o) {
  if (o.seq <= 0) throw ConfigError(str("--seq ", o.seq, " must be positive"));
  if (o.batch_tokens <= 0 || o.batch_tokens % o.seq != 0)
    throw ConfigError(
        str("batch of ", o.batch_tokens, " tokens must be a positive multiple of --seq ", o.seq));
  const int64_t rows = o.batch_tokens / o.seq;
  const int64_t micro = o.micro_batch == 0 ? rows : o.micro_batch;
  if (micro <= 0 || rows % micro != 0)
    throw ConfigError(str("batch of ", rows, " sequences (", o.batch_tokens,
                          " tokens) is not a multiple of --micro-batch ", micro));
  if (o.max_steps <= 0) throw ConfigError(str("step budget ", o.max_steps, " must be positive"));
  if (!(o.lr > 0.0) || !std::isfinite(o.lr))
    throw ConfigError(str("lr ", o.lr, " must be a positive number"));
  if (!(o.min_lr_ratio >= 0.0 && o.min_lr_ratio <= 1.0))
    throw ConfigError(str("--min-lr-ratio ", o.min_lr_ratio, " is outside [0, 1]"));
  if (o.warmup < 0) throw ConfigError(str("--warmup ", o.warmup, " must be >= 0"));
  if (!(o.clip >= 0.0 && std::isfinite(o.clip)))
    throw ConfigError(str("--clip ", o.clip, " must be a finite number >= 0 (0: off)"));
  if (o.val_windows < 0)
    throw ConfigError(str("--val-windows ", o.val_windows, " must be 0 or more"));
  for (double t : o.target_losses)
    if (!(t > 0.0) || !std::isfinite(t))
      throw ConfigError(str("--target-loss ", t,
                            " must be a positive number (a cross-entropy never goes below 0)"));
  if (o.loss_window <= 0)
    throw ConfigError(str("--loss-window ", o.loss_window, " must be positive"));
  if (o.extra_steps < 0) throw ConfigError(str("--extra-steps ", o.extra_steps, " must be >= 0"));
  for (size_t i = 1; i < o.target_losses.size(); ++i)
    if (!(o.target_losses[i] < o.target_losses[i - 1]))
      throw ConfigError(str("target losses must be strictly decreasing (", o.target_losses[i - 1],
                            " then ", o.target_losses[i], ")"));
}

namespace {

// The training loss averaged over the last `window` steps (see Note [Smoothed training loss]).
class SmoothedLoss {
 public:
  explicit SmoothedLoss(int64_t window) : window_(window) {}

  // Adds a step's loss; returns the mean over the window.
  double add(double loss) {
    losses_.push_back(loss);
    if (int64_t(losses_.size()) > window_) losses_.pop_front();
    double smoothed = 0.0;  // a fresh sum each step: no drift from a running add and subtract
    for (double l : losses_) smoothed += l;
    smoothed /= double(losses_.size());
    return smoothed;
  }
  bool full() const { return int64_t(losses_.size()) == window_; }

 private:
  int64_t window_;
  std::deque<double> losses_;
};

// The curve's points: at steps ceil(max_steps i / n), i = 1 .. n, each step once.
class CurveSampler {
 public:
  CurveSampler(int64_t max_steps, int64_t curve_points)
      : max_steps_(max_steps), n_(std::max<int64_t>(1, curve_points)) {
    next_ = step_of(i_);
  }

  void record(std::vector<CurvePoint>& curve, int64_t step, int64_t tokens, double smoothed) {
    while (step >= next_ && i_ <= n_) {
      if (step == next_ && (curve.empty() || curve.back().step != step))
        curve.push_back({step, tokens, smoothed});
      next_ = step_of(++i_);
    }
  }

 private:
  int64_t step_of(int64_t i) const { return (max_steps_ * i + n_ - 1) / n_; }
  int64_t max_steps_, n_;
  int64_t i_ = 1, next_ = 1;
};

// Marks the step at which each level is first reached by a full window's smoothed loss, and the
// loss reduction extra_steps after it.
class TargetTracker {
 public:
  explicit TargetTracker(size_t levels) : loss_at_target_(levels, 0.0) {}

  void update(std::vector<ShortRunResult::TargetLevel>& levels, int64_t step, double smoothed,
              bool window_full, int64_t extra_steps, const std::optional<GradNoiseProbe>& probe) {
    for (size_t i = 0; i < levels.size(); ++i) {
      ShortRunResult::TargetLevel& level = levels[i];
      if (!level.steps && window_full && smoothed <= level.target) {
        level.steps = step;
        loss_at_target_[i] = smoothed;
        // this step's gradients are in the estimator already (gradients() fed the probe)
        if (probe) level.b_simple_at_target = probe->estimator().b_simple();
      }
      if (level.steps && step == *level.steps + extra_steps)
        level.loss_reduction = loss_at_target_[i] - smoothed;
    }
  }

 private:
  std::vector<double> loss_at_target_;
};

// Steps until the budget, a divergence, or the last level's loss reduction; fills r's losses,
// curve and targets.
void train_steps(ShortRunResult& r, TrainStep& train_step, const LrSchedule& schedule,
                 const std::optional<GradNoiseProbe>& probe, const ShortRunOptions& o) {
  r.best_loss = std::numeric_limits<double>::infinity();
  SmoothedLoss window(o.loss_window);
  double first_loss = 0.0;
  TargetTracker tracker(o.target_losses.size());
  for (double t : o.target_losses)
    r.targets.push_back({t, std::nullopt, std::nullopt, std::nullopt});
  CurveSampler curve(o.max_steps, o.curve_points);
  for (int64_t step = 1; step <= o.max_steps; ++step) {
    const StepGradients g = train_step.gradients(step);
    const double loss = g.loss;
    r.steps = step;
    r.tokens = step * o.batch_tokens;
    if (step == 1) first_loss = loss;
    const double smoothed = window.add(loss);
    if (!std::isfinite(loss) || !std::isfinite(g.grad_sq) || smoothed > first_loss + 2.0) {
      r.diverged = true;
      break;
    }
    r.best_loss = std::min(r.best_loss, smoothed);
    r.final_loss = smoothed;
    curve.record(r.curve, step, r.tokens, smoothed);
    tracker.update(r.targets, step, smoothed, window.full(), o.extra_steps, probe);
    if (!r.targets.empty() && r.targets.back().loss_reduction) break;
    train_step.update(g, schedule.at(step), o.clip);
  }
}

}  // namespace

ShortRunResult run_short(Backend& backend, const ModelConfig& config, const TokenData& train,
                         const TokenData* val, const ShortRunOptions& o) {
  check_short_run(o);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t rows = o.batch_tokens / o.seq;
  const int64_t micro_rows = o.micro_batch == 0 ? rows : o.micro_batch;
  const int64_t micro_steps = rows / micro_rows;
  const WindowSampler sampler(train, o.seq, o.seed);
  SelfCommunicator data_parallel(backend);
  Model model(config, backend);
  model.init(o.seed);
  const std::unique_ptr<Optimizer> opt =
      make_optimizer(o.optimizer.name, model.layout(), o.optimizer.options, backend);
  std::optional<GradNoiseProbe> probe;
  if (o.gns && micro_steps >= 2)
    probe.emplace(model.params_numel(), micro_steps, micro_rows * o.seq,
                  scaling::NoiseScaleOptions{}, backend);
  CachingAllocator alloc(0, backend.allocator(backend.device_space()));
  KeepStrategy strategy(model.skeletal(), alloc);
  const LrSchedule schedule{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.max_steps};
  TrainStep train_step(
      model, *opt, strategy, alloc, StepShape{micro_rows, o.seq, micro_steps},
      [&sampler](int64_t step, int64_t micro, int32_t* in, int32_t* tgt, int64_t rows) {
        sampler.fill(step, micro, in, tgt, rows);
      },
      probe ? &*probe : nullptr, data_parallel);

  ShortRunResult r;
  train_steps(r, train_step, schedule, probe, o);
  if (r.diverged) r.final_loss = std::numeric_limits<double>::infinity();
  if (probe) r.gns_b_simple = probe->estimator().b_simple();
  if (val && o.val_windows > 0 && !r.diverged) {
    const EvalSum v = evaluate_windows(model, strategy, alloc, WindowSampler(*val, o.seq, o.seed),
                                       micro_rows, o.val_windows);
    if (v.windows > 0) r.val_loss = v.mean_loss();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace memo
