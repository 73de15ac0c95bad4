// The step loop of `memo train`; its set-up is train/session.h, its checkpoints
// train/checkpoints.h and its log train/step_logger.h.
#include "memo/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <string>

#include "memo/core/error.h"
#include "memo/train/evaluate.h"
#include "memo/train/session.h"
#include "memo/train/step_logger.h"
#include "memo/train/stop_signals.h"

namespace memo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The gradients of one step. A non-finite loss (or, under --skip-nonfinite, gradient norm) stops
// the run with the lr to lower, unless --skip-nonfinite K allows this one: at most K such steps in
// a row are skipped (no update; the noise estimator as it was before the step), counted in
// `in_a_row`. Returns whether the step is to be applied.
bool step_gradients(TrainSession& s, const StepRun& run, StepGradients& g, int64_t& in_a_row) {
  const TrainOptions& o = s.options();
  GradNoiseProbe* const probe = s.probe();
  const std::optional<scaling::NoiseScaleState> before =
      probe && o.skip_nonfinite > 0 ? std::optional(probe->estimator().state()) : std::nullopt;
  g = s.step().gradients(run.step, run.micro_steps / s.data_parallel().size());
  const bool finite = std::isfinite(g.loss) && (o.skip_nonfinite == 0 || std::isfinite(g.grad_sq));
  if (finite) {
    in_a_row = 0;
    return true;
  }
  if (++in_a_row > o.skip_nonfinite)
    throw Error(str(
        std::isfinite(g.loss) ? str("gradient norm is ", g.grad_norm()) : str("loss is ", g.loss),
        " at step ", run.step, o.skip_nonfinite > 0 ? str(" (", in_a_row, " steps in a row)") : "",
        s.plan().noise() ? str("; lower --eps-max (the law's lr is ", run.lr, " here)")
                         : str("; lower --lr (now ", o.lr, ")")));
  if (before) probe->estimator().restore(*before);
  return false;
}

void reset_step_counters(TrainSession& s) {
  s.alloc().reset_peak();
  s.data_parallel().reset_counters();
  if (Communicator* cp = s.context_parallel()) cp->reset_counters();
  if (Communicator* tp = s.tensor_parallel()) tp->reset_counters();
}

// The validation loss after the last step and every --eval-every steps, on the same windows each
// time (in order from the start of the validation data), after the step's update, so that `memo
// plot` draws it beside the training loss. Forward only, on the evaluation strategy and
// allocator: the training steps' bits do not change.
std::optional<EvalSum> validation(TrainSession& s, int64_t step) {
  const TrainOptions& o = s.options();
  const bool due = s.plan().done() || (o.eval_every > 0 && step % o.eval_every == 0);
  if (!due || !s.data().val) return std::nullopt;
  return evaluate_windows(s.model(), s.eval_strategy(), s.caching(),
                          WindowSampler(*s.data().val, o.seq, o.seed), o.micro_batch,
                          o.val_batches * o.micro_batch, {}, &s.data_parallel());
}

// Note [Stopping a run]: why this rank would stop after this step ("" to go on), then whether any
// rank would: the flag summed over the data-, context- and tensor-parallel groups, which together
// cover the job, so every rank stops after the same step. Rank 0's reason is the one printed.
std::string stop_reason(const TrainOptions& o, double run_s, double longest_step_s) {
  if (const int signal = StopSignals::received()) return signal_name(signal);
  if (o.time_limit_s > 0 && run_s + 1.5 * longest_step_s > o.time_limit_s) return "--time-limit";
  return "";
}
bool any_rank_stops(TrainSession& s, bool mine) {
  double flag = mine ? 1.0 : 0.0;
  for (Communicator* group : {&s.data_parallel(), s.context_parallel(), s.tensor_parallel()})
    if (group && group->size() > 1) group->all_reduce_sum(std::span<double>(&flag, 1));
  return flag > 0.0;
}

}  // namespace

TrainResult train(const TrainOptions& options, Runtime& runtime) {
  const auto t_begin = Clock::now();
  const StopSignals signals(options.exit_signals);
  TrainSession s(options, runtime);
  const TrainOptions& o = s.options();
  StepLogger logger(s);
  CheckpointWriter checkpoints(o, s.model(), s.optimizer(), s.zero_shards(), s.data_parallel(),
                               s.job(), s.probe());
  logger.print_start();
  // the MFU denominator: the best of at least two timed products, over a quarter second so that
  // a run's start stays short (a process measures once: CpuBackend keeps it)
  logger.print_peaks(runtime.backend().measure_matmul_peak_flops(0.25));
  // profile on the first micro-batch; its gradients are dropped
  if (s.strategy().wants_warmup()) s.step().warmup(s.start_step() + 1);
  runtime.log() << "memo: activations: " << s.strategy().summary() << "\n";

  TrainResult result;
  const auto t_start = Clock::now();
  double longest_step_s = 0.0;
  int64_t nonfinite_in_a_row = 0;  // --skip-nonfinite
  StepSchedule& plan = s.plan();
  while (!plan.done()) {
    const StepRun run = plan.next();
    const auto t0 = Clock::now();
    const ActivationStrategy::CopyTime copy0 = s.strategy().copy_time();
    reset_step_counters(s);
    StepGradients g;
    const bool apply = step_gradients(s, run, g, nonfinite_in_a_row);
    if (apply) s.step().update(g, run.lr, o.clip);
    // B_simple after this step's update, before the next step is planned (Note [Noise batch
    // schedule]); a fixed batch only counts the step
    const std::optional<scaling::BatchChange> change =
        plan.observe(s.probe() ? s.probe()->estimator().b_simple() : std::nullopt);
    const double step_s = seconds_since(t0);
    result.steps_done = run.step;
    result.final_loss = g.loss;
    const std::optional<EvalSum> val = validation(s, run.step);
    if (val && val->tokens > 0) result.val_loss = val->mean_loss();
    logger.log_step({run, g, step_s, copy0, change, val, seconds_since(t_start), !apply});
    longest_step_s = std::max(longest_step_s, step_s);
    std::string reason = plan.done() ? "" : stop_reason(o, seconds_since(t_begin), longest_step_s);
    const bool stop = any_rank_stops(s, !reason.empty());
    if (stop && reason.empty()) reason = "another rank's request";
    if (o.checkpoints &&
        ((o.save_every > 0 && run.step % o.save_every == 0) || plan.done() || stop)) {
      std::string dir = checkpoints.save(plan, run.step);
      if (runtime.lead()) result.checkpoint = std::move(dir);
    }
    if (stop) {
      result.stopped_by = reason;
      runtime.log() << "memo: stopped by " << reason << " after step " << run.step << "; "
                    << (o.checkpoints ? str("continue with memo train --resume ", result.checkpoint)
                                      : std::string("no checkpoint (--no-checkpoint)"))
                    << "\n";
      return result;
    }
  }
  if (o.checkpoints) runtime.log() << "checkpoint: " << result.checkpoint << "\n";
  return result;
}

}  // namespace memo
