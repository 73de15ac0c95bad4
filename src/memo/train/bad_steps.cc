#include "memo/train/bad_steps.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "memo/core/error.h"

namespace memo {

BadSteps::BadSteps(int64_t skip_nonfinite, double spike_factor)
    : skip_nonfinite_(skip_nonfinite), spike_factor_(spike_factor) {
  MEMO_CHECK(skip_nonfinite >= 0 && spike_factor >= 0.0, "BadSteps: ", skip_nonfinite, ", ",
             spike_factor);
}

double BadSteps::median() const {
  if (window_.empty()) return 0.0;
  std::vector<double> v(window_.begin(), window_.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + std::ptrdiff_t(mid)) + upper) / 2.0;
}

BadSteps::Verdict BadSteps::judge(int64_t step, double loss, double grad_norm,
                                  const std::string& advice) {
  // Both, with --skip-nonfinite or without: a finite loss over gradients that overflowed would
  // write NaN into every weight at this step's update (and into the next checkpoint).
  const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
  if (!finite) {
    if (++nonfinite_in_a_row_ > skip_nonfinite_)
      throw Error(
          str(std::isfinite(loss) ? str("gradient norm is ", grad_norm) : str("loss is ", loss),
              " at step ", step,
              skip_nonfinite_ > 0 ? str(" (", nonfinite_in_a_row_, " steps in a row)") : "", "; ",
              advice));
    ++nonfinite_total_;
    return Verdict::kNonfinite;
  }
  const double m = median();
  if (spike_factor_ > 0.0 && int64_t(window_.size()) >= kSpikeMinSteps &&
      std::isfinite(grad_norm) && grad_norm > spike_factor_ * m) {
    if (++spikes_in_a_row_ > kMaxSpikesInARow)
      throw Error(str("gradient norm ", grad_norm, " at step ", step, " is above --spike-skip ",
                      spike_factor_, " times the median ", m, " for the ", spikes_in_a_row_,
                      "th step in a row: the norm has moved for good; raise --spike-skip, or ",
                      advice));
    ++spikes_total_;
    return Verdict::kSpike;
  }
  nonfinite_in_a_row_ = 0;
  spikes_in_a_row_ = 0;
  window_.push_back(grad_norm);
  if (int64_t(window_.size()) > kSpikeWindow) window_.pop_front();
  return Verdict::kApply;
}

nlohmann::json BadSteps::state() const {
  return {{"window", std::vector<double>(window_.begin(), window_.end())},
          {"nonfinite_in_a_row", nonfinite_in_a_row_},
          {"spikes_in_a_row", spikes_in_a_row_},
          {"nonfinite_skipped", nonfinite_total_},
          {"spikes_skipped", spikes_total_}};
}

void BadSteps::restore(const nlohmann::json& state) {
  window_.clear();
  nonfinite_in_a_row_ = spikes_in_a_row_ = nonfinite_total_ = spikes_total_ = 0;
  if (!state.is_object()) return;
  for (double norm : state.at("window").get<std::vector<double>>()) window_.push_back(norm);
  nonfinite_in_a_row_ = state.at("nonfinite_in_a_row");
  spikes_in_a_row_ = state.at("spikes_in_a_row");
  nonfinite_total_ = state.at("nonfinite_skipped");
  spikes_total_ = state.at("spikes_skipped");
}

}  // namespace memo
