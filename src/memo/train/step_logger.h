// The step logger of `memo train` (train/trainer.h): the start-of-run lines, and after each step
// its JSON-lines record (--log; the last step's carries the validation loss) and its progress
// line (loss, lr, gradient norm, tokens/s, MFU, ETA). Rank 0 writes; the other ranks' logger
// writes nothing.
//
// Note [TensorBoard tags]: with --tensorboard, each step's record also goes to a TensorBoard event
// file (io/tensorboard.h) as these scalars, read from the JSON record itself so the two never
// disagree (as float32); a field the record holds as null or non-finite is left out:
//   train/loss  train/lr  train/grad_norm  train/batch (sequences)   <- loss lr grad_norm batch
//   val/loss (the steps that validated)                              <- val_loss
//   perf/tokens_per_s  perf/mfu  perf/mfu_peak (fractions)           <- tokens_per_s mfu mfu_peak
//   memory/device_peak_bytes  memory/host_peak_bytes                 <- the same names
//   noise/b_simple (tokens)                                          <- gns_b_simple
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>

#include "memo/io/tensorboard.h"
#include "memo/memory/strategy.h"
#include "memo/scaling/batch_schedule.h"
#include "memo/train/evaluate.h"
#include "memo/train/session.h"
#include "memo/train/step.h"
#include "memo/train/step_schedule.h"

namespace memo {

class StepLogger {
 public:
  // Makes the run directory and opens the log (appended to when the run resumes) and the
  // TensorBoard file (a new one beside the earlier ones when the run resumes) on rank 0.
  explicit StepLogger(TrainSession& session);

  // The lines before the first step: ZeRO's shards, the model, data and layout, the backend and
  // the batch schedule.
  void print_start();
  // Then the MFU denominators (peak_flops: the matrix-product ceiling measured at start, FLOP/s;
  // the datasheet's peak where --gpu gives one) and the resume point.
  void print_peaks(double peak_flops);
  // As a length stage starts with `run` (Note [Length stages]): its shape and its activation
  // strategy.
  void print_stage(const StepRun& run);

  // What one step measured: its run, its gradients, its seconds, its copies and its batch change.
  struct Step {
    const StepRun& run;
    const StepGradients& g;
    double seconds = 0.0;
    ActivationStrategy::CopyTime copy_before;  // the strategy's copy time before the step
    const std::optional<scaling::BatchChange>& change;
    const std::optional<EvalSum>& val;  // validation after the last step
    double elapsed_s = 0.0;             // since this process's first step began
    // Note [Bad steps]: why the step was skipped (no update): "nonfinite" (--skip-nonfinite) or
    // "spike" (--spike-skip, against the median norm `spike_median`); null: applied.
    const char* skipped = nullptr;
    double spike_median = 0.0;
    // Under --pp: each stage's activation peak (bytes), seconds waiting on the pipeline group in
    // the step, under --device-memory its arena and the highest byte of it used (else 0), and
    // under memo its alpha (else -1), in stage order ([peak, wait, arena, used, alpha] per
    // stage); empty otherwise.
    std::vector<double> pipeline_stages = {};
  };
  void log_step(const Step& step);

 private:
  TrainSession& s_;
  std::ostream& progress_;
  std::ofstream log_;
  std::optional<TensorBoardWriter> tensorboard_;  // --tensorboard; rank 0 only
  double peak_flops_ = 0.0;
  int64_t start_tokens_;  // tokens before the first step of this run
  // a resumed run's log: the elapsed_s its checkpoint's step had, which this run's goes on from
  double elapsed_before_s_ = 0.0;
};

}  // namespace memo
