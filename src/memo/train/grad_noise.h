// Per-micro-batch gradient norms for the online gradient noise scale (scaling/noise_scale.h,
// DESIGN.md section 3). The model accumulates every micro-batch into its one gradient buffer, so
// to see micro-batch i's gradient alone the probe keeps the running sum in a side buffer: after
// each micro-batch one fused pass takes the squared norm of the model's buffer, adds it into the
// side buffer and zeroes it for the next micro-batch (after the last, the side buffer is added
// into the model's buffer instead, which ends holding the step's gradient). Exact: each norm is
// of that micro-batch's gradient alone, summed in double over fixed chunks and lanes in a fixed
// order (deterministic, independent of the thread count). Not here: the estimator's maths.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/parallel/communicator.h"
#include "memo/scaling/noise_scale.h"

namespace memo {

// Note [Noise-scale accounting]
// The trainer scales each micro-batch gradient by 1 / tokens per step, so what micro-batch i
// writes is g_i / k for the per-token mean gradient g_i of its b = micro-batch tokens (k
// micro-batches per step). The probe multiplies its squared norm by k^2; the step's buffer holds
// the mean of the g_i, the "big" gradient over B = k b tokens. Batch sizes are tokens, so
// tr(Sigma) is per token and B_simple comes out in tokens (= B_simple in sequences times seq when
// the loss is a token mean, as here). Norms are taken before clipping and weight decay. Under
// data parallelism each of the P ranks runs k micro-batches of the step's k P: the buffer holds
// g_i / (k P), each rank measures its own micro-batches, and end_step gathers the k P norms in rank
// order, so the estimate is the one-process run's.
// With a loss mask (--eod-mask-loss, prompt-completion data) micro-batch i counts n_i of the
// step's N targets and writes (n_i / N) g_i (Note [Counted tokens] in train/step.cc): set_counts
// gives the probe the n_i and N, it scales micro-batch i's norm by (N / n_i)^2, leaves out a
// micro-batch that counts none, and takes the small batch as the harmonic mean of the n_i (the
// mean of |g_i|^2 is |G|^2 + tr / that mean) and the big one as N.
// Reordering the accumulation changes the step gradient's rounding (the sum is formed outside
// the kernels), so a run with the probe is deterministic but not bitwise equal to one without.
class GradNoiseProbe {
 public:
  // numel: the gradient buffer's length; max_micro_steps >= 1: this rank's micro-batches per step
  // until set_micro_steps changes it, and the most it may set (sized here: a change allocates
  // nothing; a step needs >= 2 micro-batches over all ranks);
  // micro_tokens: tokens per micro-batch. The fused pass (norm, side-buffer sum, zeroing) runs on
  // `backend`.
  GradNoiseProbe(int64_t numel, int64_t max_micro_steps, int64_t micro_tokens,
                 scaling::NoiseScaleOptions options, Backend& backend);
  // The micro-batch count k of this rank's steps from now on, in [1, max_micro_steps], on each of
  // `ranks` data-parallel ranks (k ranks >= 2): a growing batch (--batch-schedule noise) adds
  // micro-batches of the same size. The estimator carries on: each step's update is unbiased for
  // its own k (Note [Noise-scale accounting]).
  void set_micro_steps(int64_t micro_steps, int64_t ranks = 1);
  int64_t micro_steps() const { return micro_steps_; }
  // Tokens per micro-batch from the next step on (a length stage's: Note [Length stages]).
  void set_micro_tokens(int64_t micro_tokens) { micro_tokens_ = micro_tokens; }
  // This step's targets the loss counts: this rank's micro-batches' (micro_steps() of them) and
  // the whole step's over every rank. Not called: every micro-batch counts micro_tokens.
  void set_counts(std::span<const int64_t> micro_counts, int64_t step_tokens);
  // After micro-batch `micro` (0-based) of a step; grads is the model's gradient buffer, zero
  // before micro-batch 0 (the trainer's zero_grads); the probe zeroes it for the later ones.
  // Under tensor parallelism (tensor_parallel: the group) each rank holds parts of the
  // micro-batch's gradient and the tensors every rank holds whole (already summed over the group):
  // the squared norm is the group's sum of each rank's, less `whole_sq` (those tensors' squared
  // norm, as the buffer holds them) on every rank but the first, so each counts once.
  void after_micro(Tensor grads, int64_t micro, Communicator* tensor_parallel = nullptr,
                   double whole_sq = 0.0);
  // The same for the `numel` entries from `offset` of the buffer only, adding their squares to
  // micro-batch `micro`'s: a pipeline rank of interleaved chunks (Note [Pipeline step]) finishes
  // a micro-batch's gradient in one part per chunk, the parts' micro-batches in order each. Every
  // part of the buffer sees micro-batches 0 .. k - 1 once each, in order, within a step.
  // adjust_sq is added to the part's squared norm (as the buffer holds it): under tensor
  // parallelism, where the caller has summed the part's whole tensors over the group, minus their
  // squared norm on every rank but the group's first, so each counts once when end_step sums the
  // group's parts; with a tied embedding across stages, plus twice the dot product of its two
  // halves on the first stage (Note [Tied embedding probe] in train/pipeline_step.cc).
  void after_micro_part(Tensor grads, int64_t offset, int64_t numel, int64_t micro,
                        double adjust_sq = 0.0);
  // After the last micro-batch: |G|^2 of the step's gradient over every rank (before clipping).
  // With several ranks, data_parallel gathers their micro-batch norms (collective). Under a
  // pipeline (Note [Pipeline step] in train/pipeline_step.cc) each stage measured its own
  // tensors' part of every micro-batch: `tensor_parallel` (its ranks' parts, after_micro_part's
  // under --pp --tp) and `pipeline` sum them first (collective).
  void end_step(double step_sq_norm, Communicator* data_parallel = nullptr,
                Communicator* pipeline = nullptr, Communicator* tensor_parallel = nullptr);

  // |g_i|^2 of the last step's micro-batches, per-token-mean gradients (k^2 times the buffer's;
  // (N / n_i)^2 times with counts, 0 for a micro-batch that counts none).
  const std::vector<double>& micro_sq_norms() const { return micro_sq_; }
  const scaling::NoiseScaleEstimator& estimator() const { return estimator_; }
  scaling::NoiseScaleEstimator& estimator() { return estimator_; }
  // {"gns_b_simple", "gns_g2", "gns_trace"}, each null until available (a JSON-log fragment).
  nlohmann::json log_fields() const;

 private:
  int64_t numel_;
  int64_t max_micro_steps_;
  int64_t micro_steps_;  // k of this step, on this rank
  int64_t ranks_ = 1;    // data-parallel ranks: the step has k ranks micro-batches
  int64_t micro_tokens_;
  scaling::NoiseScaleEstimator estimator_;
  Backend& backend_;
  SpaceArray<float> sum_;         // [numel] fp32: the step's gradient so far; live within a step
  std::vector<double> micro_sq_;  // [micro_steps_] |g_i|^2 of this rank's micro-batches;
                                  // capacity max_micro_steps_
  std::vector<double> all_sq_;    // [micro_steps_ ranks_] every rank's, in rank order
  // set_counts: this rank's n_i ([micro_steps_]; capacity max_micro_steps_), the step's N (0: not
  // given this step, every micro-batch counts micro_tokens_), and every rank's n_i
  std::vector<double> counts_;
  double step_tokens_ = 0.0;
  std::vector<double> all_counts_;
  double scale(int64_t micro) const;  // N / n_i (k without counts): the buffer holds g_i / it
  void update(const std::vector<double>& sq, const std::vector<double>& counts, double big_sq);
  std::vector<double> partial_;  // [chunks] per-chunk sums of the fused pass
};

// The log fields for a run without the probe: all null.
nlohmann::json gns_null_fields();

}  // namespace memo
