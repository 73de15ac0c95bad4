// Which steps `memo train` applies: see Note [Bad steps].
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memo {

// Note [Bad steps]
// A step whose gradients would damage the model is skipped: the optimiser does not update (its
// state, its step count and the noise estimator stay as they were before the step) and the log
// says which step and why. The step's windows are spent all the same: the next step takes the
// next windows, so no data is replayed. Two kinds, each off by default:
//  - non-finite (--skip-nonfinite K): a loss or gradient norm that is inf or NaN;
//  - a spike (--spike-skip X): a finite gradient norm above X times the median of the norms of
//    the last kSpikeWindow applied steps, judged once kSpikeMinSteps have been applied (the
//    median of fewer says little; warm-up's first steps move fast).
// Skips in a row are bounded, since a run that skips every step only burns compute: more than K
// non-finite steps in a row, or more than kMaxSpikesInARow spikes in a row (the norm has moved
// for good: X is too low for this run), stop the run with an error that names the step. The
// window and the counts are part of a checkpoint (trainer_state.json's "bad_steps"), so a
// resumed run judges its steps as the uninterrupted one would. The gradient norm is the global
// one, before clipping, the same on every rank: every rank skips the same steps.
class BadSteps {
 public:
  static constexpr int64_t kSpikeWindow = 32;
  static constexpr int64_t kSpikeMinSteps = 8;
  static constexpr int64_t kMaxSpikesInARow = 8;

  enum class Verdict { kApply, kNonfinite, kSpike };

  // skip_nonfinite: K of --skip-nonfinite (0: the first non-finite step stops the run);
  // spike_factor: X of --spike-skip (0: off).
  BadSteps(int64_t skip_nonfinite, double spike_factor);

  // Whether either kind can skip a step (the trainer then keeps what a skip restores).
  bool can_skip() const { return skip_nonfinite_ > 0 || spike_factor_ > 0.0; }

  // The verdict on a step's loss and global gradient norm; an applied step's norm joins the
  // window. Throws Error when the step is one bad step too many in a row: "<what> at step N
  // (...)" followed by `advice` (what to lower).
  Verdict judge(int64_t step, double loss, double grad_norm, const std::string& advice);

  // The median of the window (0 when empty): what a spike is measured against.
  double median() const;
  int64_t nonfinite_skipped() const { return nonfinite_total_; }
  int64_t spikes_skipped() const { return spikes_total_; }

  // For trainer_state.json, and back. A checkpoint without the field (older, or a run without
  // skipping) restores the empty state.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  int64_t skip_nonfinite_;
  double spike_factor_;
  std::deque<double> window_;  // the norms of the last kSpikeWindow applied steps, oldest first
  int64_t nonfinite_in_a_row_ = 0, spikes_in_a_row_ = 0;
  int64_t nonfinite_total_ = 0, spikes_total_ = 0;
};

}  // namespace memo
