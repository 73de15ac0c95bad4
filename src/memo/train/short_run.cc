#include "memo/train/short_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>

#include "memo/backend/caching_allocator.h"
#include "memo/core/error.h"
#include "memo/data/sampler.h"
#include "memo/kernels/cpu/tensor_ops.h"
#include "memo/memory/strategy.h"
#include "memo/model/model.h"
#include "memo/train/grad_noise.h"
#include "memo/train/schedule.h"

namespace memo {
namespace {

void check_options(const ShortRunOptions& o) {
  if (o.seq <= 0) throw ConfigError(str("--seq ", o.seq, " must be positive"));
  if (o.batch_tokens <= 0 || o.batch_tokens % o.seq != 0)
    throw ConfigError(str("batch of ", o.batch_tokens, " tokens must be a positive multiple of --seq ", o.seq));
  const int64_t rows = o.batch_tokens / o.seq;
  const int64_t micro = o.micro_batch == 0 ? rows : o.micro_batch;
  if (micro <= 0 || rows % micro != 0)
    throw ConfigError(str("batch of ", rows, " sequences (", o.batch_tokens,
                          " tokens) is not a multiple of --micro-batch ", micro));
  if (o.max_steps <= 0) throw ConfigError(str("step budget ", o.max_steps, " must be positive"));
  if (!(o.lr > 0.0)) throw ConfigError(str("lr ", o.lr, " must be positive"));
  if (o.loss_window <= 0) throw ConfigError(str("--loss-window ", o.loss_window, " must be positive"));
  if (o.target_loss && o.extra_steps < 0)
    throw ConfigError(str("--extra-steps ", o.extra_steps, " must be >= 0"));
}

}  // namespace

ShortRunResult run_short(const ModelConfig& config, const TokenData& train, const TokenData* val,
                         const ShortRunOptions& o) {
  check_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t rows = o.batch_tokens / o.seq;
  const int64_t micro_rows = o.micro_batch == 0 ? rows : o.micro_batch;
  const int64_t micro_steps = rows / micro_rows;
  const WindowSampler sampler(train, o.seq, o.seed);
  Model model(config);
  model.init(o.seed);
  const std::unique_ptr<Optimizer> opt = make_optimizer(o.optimizer.name, model.layout(), o.optimizer.options);
  std::optional<GradNoiseProbe> probe;
  if (o.gns && micro_steps >= 2) probe.emplace(model.params_numel(), micro_steps, micro_rows * o.seq);
  CachingAllocator alloc;
  KeepStrategy strategy(config, alloc);
  const LrSchedule schedule{o.lr, o.lr * o.min_lr_ratio, o.warmup, o.max_steps};
  std::vector<int32_t> inputs(size_t(micro_rows * o.seq)), targets(inputs.size());
  const float grad_scale = 1.0f / float(o.batch_tokens);
  const ConstTensor grads(model.grads(), {model.params_numel()});

  ShortRunResult r;
  r.best_loss = std::numeric_limits<double>::infinity();
  std::deque<double> window;  // see Note [Smoothed training loss]
  double first_loss = 0.0, loss_at_target = 0.0;
  int64_t next_curve = 1, curve_i = 1;
  const int64_t n_curve = std::max<int64_t>(1, o.curve_points);
  auto curve_step = [&](int64_t i) { return (o.max_steps * i + n_curve - 1) / n_curve; };
  next_curve = curve_step(curve_i);
  for (int64_t step = 1; step <= o.max_steps; ++step) {
    model.zero_grads();
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < micro_steps; ++micro) {
      sampler.fill(step, micro, inputs.data(), targets.data(), micro_rows);
      loss_sum += model.forward_backward(inputs.data(), targets.data(), micro_rows, o.seq,
                                         grad_scale, strategy, alloc);
      if (probe) probe->after_micro(model.grads(), micro);
    }
    const double loss = loss_sum / double(o.batch_tokens);
    r.steps = step;
    r.tokens = step * o.batch_tokens;
    if (step == 1) first_loss = loss;
    const double grad_sq = cpu::sum_squares(grads);
    if (probe) probe->end_step(grad_sq);
    window.push_back(loss);
    if (int64_t(window.size()) > o.loss_window) window.pop_front();
    double smoothed = 0.0;  // a fresh sum each step: no drift from a running add and subtract
    for (double l : window) smoothed += l;
    smoothed /= double(window.size());
    if (!std::isfinite(loss) || !std::isfinite(grad_sq) || smoothed > first_loss + 2.0) {
      r.diverged = true;
      break;
    }
    r.best_loss = std::min(r.best_loss, smoothed);
    r.final_loss = smoothed;
    while (step >= next_curve && curve_i <= n_curve) {
      if (step == next_curve && (r.curve.empty() || r.curve.back().step != step))
        r.curve.push_back({step, r.tokens, smoothed});
      next_curve = curve_step(++curve_i);
    }
    if (o.target_loss) {
      if (!r.target_steps && int64_t(window.size()) == o.loss_window && smoothed <= *o.target_loss) {
        r.target_steps = step;
        loss_at_target = smoothed;
      }
      if (r.target_steps && step == *r.target_steps + o.extra_steps) {
        r.loss_reduction = loss_at_target - smoothed;
        break;
      }
    }
    const double grad_norm = std::sqrt(grad_sq);
    if (o.clip > 0 && grad_norm > o.clip)
      cpu::scale(Tensor(model.grads(), {model.params_numel()}), float(o.clip / (grad_norm + 1e-6)));
    opt->step(model.params(), model.grads(), schedule.at(step));
  }
  if (r.diverged) r.final_loss = std::numeric_limits<double>::infinity();
  if (probe) r.gns_b_simple = probe->estimator().b_simple();
  if (val && o.val_windows > 0 && !r.diverged) {
    const WindowSampler val_sampler(*val, o.seq, o.seed);
    const int64_t windows = std::min(o.val_windows, val_sampler.num_sequential_windows());
    double sum = 0.0;
    for (int64_t w = 0; w < windows; w += micro_rows) {
      const int64_t n = std::min(micro_rows, windows - w);
      val_sampler.fill_sequential(w, inputs.data(), targets.data(), n);
      sum += model.forward_loss(inputs.data(), targets.data(), n, o.seq, strategy, alloc);
    }
    if (windows > 0) r.val_loss = sum / double(windows * o.seq);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace memo
