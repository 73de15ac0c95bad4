// The step loop of `memo train`; its set-up is train/session.h, its checkpoints
// train/checkpoints.h and its log train/step_logger.h.
#include "memo/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/units.h"
#include "memo/train/bad_steps.h"
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

// The gradients of one step, and Note [Bad steps]'s verdict on them: a non-finite loss stops the
// run with the lr to lower unless --skip-nonfinite allows a skip, and --spike-skip skips a spike.
// A skipped step leaves the noise estimator as it was before the step (the trainer does not
// update). Returns the verdict.
BadSteps::Verdict step_gradients(TrainSession& s, const StepRun& run, StepGradients& g,
                                 BadSteps& bad) {
  const TrainOptions& o = s.options();
  GradNoiseProbe* const probe = s.probe();
  const std::optional<scaling::NoiseScaleState> before =
      probe && bad.can_skip() ? std::optional(probe->estimator().state()) : std::nullopt;
  g = s.step().gradients(run.step, run.micro_steps / s.data_parallel().size());
  const BadSteps::Verdict verdict =
      bad.judge(run.step, g.loss, g.grad_norm(),
                s.plan().noise() ? str("lower --eps-max (the law's lr is ", run.lr, " here)")
                                 : str("lower --lr (now ", o.lr, ")"));
  if (verdict != BadSteps::Verdict::kApply && before) probe->estimator().restore(*before);
  return verdict;
}

const char* skip_name(BadSteps::Verdict v) {
  switch (v) {
    case BadSteps::Verdict::kApply:
      return nullptr;
    case BadSteps::Verdict::kNonfinite:
      return "nonfinite";
    case BadSteps::Verdict::kSpike:
      return "spike";
  }
  return nullptr;
}

std::vector<Communicator*> step_groups(TrainSession& s) {
  std::vector<Communicator*> groups{&s.data_parallel()};
  for (Communicator* g : {s.context_parallel(), s.tensor_parallel(), s.pipeline()})
    if (g) groups.push_back(g);
  return groups;
}

void reset_step_counters(TrainSession& s) {
  s.alloc().reset_peak();
  for (Communicator* g : step_groups(s)) g->reset_counters();
}

// The validation loss after the last step and every --eval-every steps, on the same windows each
// time (in order from the start of the validation data), after the step's update, so that `memo
// plot` draws it beside the training loss. Forward only, on the evaluation strategy and
// allocator: the training steps' bits do not change.
std::optional<EvalSum> validation(TrainSession& s, int64_t step) {
  const TrainOptions& o = s.options();
  const bool due = s.plan().done() || (o.eval_every > 0 && step % o.eval_every == 0);
  if (!due || !s.data().val) return std::nullopt;
  // --eval-tokens: the windows that hold that many targets, else --val-batches micro-batches
  // (at the current stage's length: Note [Length stages])
  const int64_t seq = s.stage().seq, micro_batch = s.stage().micro_batch;
  // (written so that neither overflows: INT64_MAX means all of it, as any count past it does)
  const int64_t windows = o.eval_tokens > 0 ? o.eval_tokens / seq + (o.eval_tokens % seq != 0)
                          : o.val_batches > std::numeric_limits<int64_t>::max() / micro_batch
                              ? std::numeric_limits<int64_t>::max()
                              : o.val_batches * micro_batch;
  if (windows == 0) return std::nullopt;  // --val-batches 0: no validation
  EvalForward forward;                    // under --pp: the batch through the pipeline
  if (const std::optional<TrainStep::Pipeline>& pp = s.step().pipeline())
    forward = [&s, &pp](const int32_t* inputs, const int32_t* targets, int64_t rows, int64_t n) {
      return pipeline_forward_loss(s.model(), *pp, inputs, targets, rows, n, s.eval_strategy(),
                                   s.caching());
    };
  return evaluate_windows(s.model(), s.eval_strategy(), s.caching(),
                          WindowSampler(*s.data().val, seq, o.seed), micro_batch, windows, {},
                          &s.data_parallel(), 0, forward);
}

// --save-best: whether this validation's loss is below every one before (the best so far is
// `best`, updated), agreed by every rank (a checkpoint is collective): rank 0's verdict counts.
bool new_best(TrainSession& s, const std::optional<EvalSum>& val, int64_t step,
              std::optional<BestCheckpoint>& best) {
  const bool lower = val && val->tokens > 0 && (!best || val->mean_loss() < best->val_loss);
  double flag = s.job().rank() == 0 && lower ? 1.0 : 0.0;
  if (s.job().size() > 1) s.job().all_reduce_sum(std::span<double>(&flag, 1));
  if (flag == 0.0) return false;
  best = BestCheckpoint{step, val ? val->mean_loss() : 0.0};
  return true;
}

// Note [Stopping a run]: why this rank would stop after this step ("" to go on), then whether any
// rank would: the flag summed over the data-, context-, tensor-parallel and pipeline groups, which
// together cover the job, so every rank stops after the same step. Rank 0's reason is the one
// printed.
std::string stop_reason(const TrainOptions& o, double run_s, double longest_step_s) {
  if (const int signal = StopSignals::received()) return signal_name(signal);
  if (o.time_limit_s > 0 && run_s + 1.5 * longest_step_s > o.time_limit_s) return "--time-limit";
  return "";
}
bool any_rank_stops(TrainSession& s, bool mine) {
  double flag = mine ? 1.0 : 0.0;
  for (Communicator* group :
       {&s.data_parallel(), s.context_parallel(), s.tensor_parallel(), s.pipeline()})
    if (group && group->size() > 1) group->all_reduce_sum(std::span<double>(&flag, 1));
  return flag > 0.0;
}

// The command that continues a stopped run bit for bit: the checkpoint (which restores the
// run's steps, data and the options that shape it, Note [Resume]) and the job's layout, which a
// checkpoint does not pin (it resumes on any layout, within rounding).
std::string resume_command(TrainSession& s, const std::string& checkpoint) {
  const TrainOptions& o = s.options();
  std::string cmd = str("memo train --resume ", shell_word(checkpoint));
  if (o.cp > 1) cmd += str(" --cp ", o.cp);
  if (o.tp > 1) cmd += str(" --tp ", o.tp);
  if (o.pp > 1) cmd += str(" --pp ", o.pp);
  if (o.virtual_stages > 1) cmd += str(" --virtual-stages ", o.virtual_stages);
  if (!o.pp_layers.empty()) cmd += str(" --pp-layers ", o.pp_layers);
  if (s.job().size() > 1) cmd += str(" in a job of ", s.job().size(), " processes as this one");
  return cmd;
}

}  // namespace

TrainResult train(const TrainOptions& options, Runtime& runtime) {
  const auto t_begin = Clock::now();
  const StopSignals signals(options.exit_signals);
  TrainSession s(options, runtime);
  const TrainOptions& o = s.options();
  StepLogger logger(s);
  CheckpointWriter checkpoints(o, s.model(), s.optimizer(), s.zero_shards(), s.data_parallel(),
                               s.job(), s.probe(), s.pipeline());
  BadSteps bad(o.skip_nonfinite, o.spike_skip);
  std::optional<BestCheckpoint> best;
  if (s.resume()) {
    const nlohmann::json& state = s.resume()->checkpoint.trainer_state;
    bad.restore(state.value("bad_steps", nlohmann::json()));
    best = best_checkpoint_from_state(state);
  }
  logger.print_start();
  // the MFU denominator: the best of at least two timed products, over a quarter second so that
  // a run's start stays short (a process measures once: CpuBackend keeps it)
  logger.print_peaks(runtime.backend().measure_matmul_peak_flops(0.25));
  // profile on the first micro-batch, run twice, its gradients dropped (under --pp each stage
  // profiles its second pass instead: Note [Pipeline alpha] in train/session.cc)
  if (!s.step().pipeline() && s.strategy().wants_warmup()) s.step().warmup(s.start_step() + 1);
  runtime.log() << "memo: activations: " << s.activation_summary() << "\n";

  TrainResult result;
  const auto t_start = Clock::now();
  double longest_step_s = 0.0;
  StepSchedule& plan = s.plan();
  while (!plan.done()) {
    const StepRun run = plan.next();
    if (run.stage != s.stage_index()) {  // Note [Length stages]
      s.enter_stage(run.stage);
      if (!s.step().pipeline() && s.strategy().wants_warmup()) s.step().warmup(run.step);
      logger.print_stage(run);
    }
    const auto t0 = Clock::now();
    const ActivationStrategy::CopyTime copy0 = s.copy_time();
    reset_step_counters(s);
    StepGradients g;
    const double median = bad.median();      // what a spike is measured against
    s.plan_pipeline_batch(run.micro_steps);  // Note [Pipeline plans per batch]
    const BadSteps::Verdict verdict = step_gradients(s, run, g, bad);
    if (verdict == BadSteps::Verdict::kApply) s.step().update(g, run.lr, o.clip);
    // B_simple after this step's update, before the next step is planned (Note [Noise batch
    // schedule]); a fixed batch only counts the step
    const std::optional<scaling::BatchChange> change =
        plan.observe(s.probe() ? s.probe()->estimator().b_simple() : std::nullopt);
    const double step_s = seconds_since(t0);
    // under --pp: each stage's activation peak and its seconds waiting on its neighbours (the
    // bubble and the transfers), before validation adds to either; under a static plan, its
    // arena and the highest byte of it the step used; under memo, its alpha
    std::vector<double> stages;
    if (Communicator* pp = s.pipeline()) {
      const PlannedAllocator* arena = s.planned();
      const double mine[5] = {double(s.alloc().peak_live_bytes()), pp->counters().seconds,
                              arena ? double(arena->reserved_bytes()) : 0.0,
                              arena ? double(arena->peak_top_bytes()) : 0.0,
                              s.pipeline_alpha().value_or(-1.0)};
      stages.resize(size_t(5 * pp->size()));
      pp->all_gather(stages, mine);
    }
    result.steps_done = run.step;
    result.final_loss = g.loss;
    // the step's record counts the step's collectives, not validation's
    std::vector<CommCounters> counted;
    for (Communicator* g : step_groups(s)) counted.push_back(g->counters());
    const std::optional<EvalSum> val = validation(s, run.step);
    for (size_t i = 0; Communicator * g : step_groups(s)) g->restore_counters(counted[i++]);
    if (val && val->tokens > 0) result.val_loss = val->mean_loss();
    logger.log_step({run, g, step_s, copy0, change, val, seconds_since(t_start), skip_name(verdict),
                     median, std::move(stages)});
    longest_step_s = std::max(longest_step_s, step_s);
    std::string reason = plan.done() ? "" : stop_reason(o, seconds_since(t_begin), longest_step_s);
    const bool stop = any_rank_stops(s, !reason.empty());
    if (stop && reason.empty()) reason = "another rank's request";
    const bool is_best = o.save_best && o.checkpoints && new_best(s, val, run.step, best);
    if (o.checkpoints &&
        ((o.save_every > 0 && run.step % o.save_every == 0) || plan.done() || stop || is_best)) {
      std::string dir = checkpoints.save(plan, run.step, {bad.state(), best, is_best});
      if (runtime.lead()) result.checkpoint = std::move(dir);
    }
    if (stop) {
      checkpoints.wait();  // the checkpoint is on disk before the process says so and exits
      result.stopped_by = reason;
      runtime.log() << "memo: stopped by " << reason << " after step " << run.step << "; "
                    << (o.checkpoints ? str("continue with ", resume_command(s, result.checkpoint))
                                      : std::string("no checkpoint (--no-checkpoint)"))
                    << "\n";
      return result;
    }
  }
  checkpoints.wait();
  if (bad.nonfinite_skipped() + bad.spikes_skipped() > 0)
    runtime.log() << "memo: " << bad.nonfinite_skipped() + bad.spikes_skipped()
                  << " steps skipped in the whole run (" << bad.nonfinite_skipped()
                  << " non-finite, " << bad.spikes_skipped() << " spikes)\n";
  if (o.checkpoints) runtime.log() << "checkpoint: " << result.checkpoint << "\n";
  if (o.save_best && best && runtime.lead())
    runtime.log() << "best: "
                  << (std::filesystem::path(o.out_dir) / checkpoint_dir_name(best->step)).string()
                  << " (validation loss " << best->val_loss << ")\n";
  return result;
}

}  // namespace memo
