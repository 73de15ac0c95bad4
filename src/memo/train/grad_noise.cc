#include "memo/train/grad_noise.h"

#include <algorithm>

#include "memo/core/error.h"

namespace memo {

GradNoiseProbe::GradNoiseProbe(int64_t numel, int64_t max_micro_steps, int64_t micro_tokens,
                               scaling::NoiseScaleOptions options, Backend& backend)
    : numel_(numel),
      max_micro_steps_(max_micro_steps),
      micro_steps_(max_micro_steps),
      micro_tokens_(micro_tokens),
      estimator_(options),
      backend_(backend),
      sum_(backend, numel, "the noise probe's side buffer"),
      micro_sq_(size_t(std::max<int64_t>(max_micro_steps, 0)), 0.0),
      counts_(size_t(std::max<int64_t>(max_micro_steps, 0)), 0.0),
      partial_(size_t(backend.noise_probe_partial_numel(numel)), 0.0) {
  MEMO_CHECK(max_micro_steps >= 1 && micro_tokens > 0, "noise probe needs micro-batches, got ",
             max_micro_steps, " of ", micro_tokens, " tokens");
}

void GradNoiseProbe::set_micro_steps(int64_t micro_steps, int64_t ranks) {
  MEMO_CHECK(
      micro_steps >= 1 && micro_steps <= max_micro_steps_ && ranks >= 1 && micro_steps * ranks >= 2,
      "noise probe: ", micro_steps, " micro-batches per step on each of ", ranks,
      " ranks (need >= 2 in all, at most ", max_micro_steps_, " per rank)");
  micro_steps_ = micro_steps;
  ranks_ = ranks;
  micro_sq_.assign(size_t(micro_steps), 0.0);  // within the capacity reserved at construction
  counts_.assign(size_t(micro_steps), 0.0);
  step_tokens_ = 0.0;  // until set_counts: every micro-batch counts micro_tokens_
}

void GradNoiseProbe::set_counts(std::span<const int64_t> micro_counts, int64_t step_tokens) {
  MEMO_CHECK(int64_t(micro_counts.size()) == micro_steps_ && step_tokens > 0,
             "noise probe: counts of ", micro_counts.size(), " micro-batches (", micro_steps_,
             " run) and ", step_tokens, " in the step");
  for (size_t i = 0; i < micro_counts.size(); ++i) counts_[i] = double(micro_counts[i]);
  step_tokens_ = double(step_tokens);
}

double GradNoiseProbe::scale(int64_t micro) const {
  if (step_tokens_ == 0.0) return double(micro_steps_ * ranks_);
  const double n = counts_[size_t(micro)];
  return n > 0.0 ? step_tokens_ / n : 0.0;
}

void GradNoiseProbe::update(const std::vector<double>& sq, const std::vector<double>& counts,
                            double big_sq) {
  if (step_tokens_ == 0.0) {
    estimator_.update(sq, big_sq, double(micro_tokens_));
    return;
  }
  std::vector<double> counted;  // the micro-batches that count targets, and 1 / n_i summed
  double inverse_sum = 0.0;
  for (size_t i = 0; i < sq.size(); ++i)
    if (counts[i] > 0.0) {
      counted.push_back(sq[i]);
      inverse_sum += 1.0 / counts[i];
    }
  if (counted.size() < 2) return;  // this step has no two gradients to compare
  estimator_.update(counted, big_sq, double(counted.size()) / inverse_sum, step_tokens_);
}

void GradNoiseProbe::after_micro(Tensor grads, int64_t micro, Communicator* tensor_parallel,
                                 double whole_sq) {
  MEMO_CHECK(grads.numel() == numel_ && grads.contiguous(), "noise probe: gradients ",
             grads.shape(), " are not the flat buffer of ", numel_);
  const double k = scale(micro);  // the buffer holds g_i / k
  double sq = 0.0;
  if (micro_steps_ == 1) {  // this rank's only micro-batch: the buffer is its gradient alone
    sq = backend_.sum_squares(grads);
  } else {
    const NoiseProbePass pass = micro == 0                 ? NoiseProbePass::kFirst
                                : micro + 1 < micro_steps_ ? NoiseProbePass::kMiddle
                                                           : NoiseProbePass::kLast;
    sq = backend_.noise_probe_pass(grads, sum_.tensor({numel_}), pass,
                                   View<double>(partial_.data(), {int64_t(partial_.size())}));
  }
  if (tensor_parallel && tensor_parallel->size() > 1) {  // the group's parts, whole tensors once
    if (tensor_parallel->rank() != 0) sq -= whole_sq;
    tensor_parallel->all_reduce_sum(std::span<double>(&sq, 1));
  }
  // see Note [Noise-scale accounting]: the buffer holds g_i / k
  micro_sq_[size_t(micro)] = k * k * sq;
}

void GradNoiseProbe::after_micro_part(Tensor grads, int64_t offset, int64_t numel, int64_t micro,
                                      double adjust_sq) {
  MEMO_CHECK(grads.numel() == numel_ && grads.contiguous() && offset >= 0 && numel >= 0 &&
                 offset + numel <= numel_ && micro >= 0 && micro < micro_steps_,
             "noise probe: part [", offset, ", ", offset + numel, ") of micro-batch ", micro,
             " in a buffer of ", numel_, " and ", micro_steps_, " micro-batches");
  const double k = scale(micro);  // the buffer holds g_i / k
  const Tensor g = grads.part(offset, Shape{numel});
  double sq = 0.0;
  if (micro_steps_ == 1) {
    sq = backend_.sum_squares(g);
  } else {
    const NoiseProbePass pass = micro == 0                 ? NoiseProbePass::kFirst
                                : micro + 1 < micro_steps_ ? NoiseProbePass::kMiddle
                                                           : NoiseProbePass::kLast;
    sq = backend_.noise_probe_pass(
        g, sum_.tensor({numel_}).part(offset, Shape{numel}), pass,
        View<double>(partial_.data(), {backend_.noise_probe_partial_numel(numel)}));
  }
  micro_sq_[size_t(micro)] += k * k * (sq + adjust_sq);
}

void GradNoiseProbe::end_step(double step_sq_norm, Communicator* data_parallel,
                              Communicator* pipeline, Communicator* tensor_parallel) {
  if (tensor_parallel && tensor_parallel->size() > 1)
    tensor_parallel->all_reduce_sum(std::span<double>(micro_sq_));
  if (pipeline && pipeline->size() > 1) pipeline->all_reduce_sum(std::span<double>(micro_sq_));
  if (ranks_ == 1) {
    update(micro_sq_, counts_, step_sq_norm);
    return;
  }
  MEMO_CHECK(data_parallel && data_parallel->size() == ranks_, "noise probe: a step of ", ranks_,
             " ranks needs their communicator");
  all_sq_.resize(micro_sq_.size() * size_t(ranks_));
  data_parallel->all_gather(std::span<double>(all_sq_), std::span<const double>(micro_sq_));
  all_counts_.resize(all_sq_.size());
  if (step_tokens_ > 0.0)
    data_parallel->all_gather(std::span<double>(all_counts_), std::span<const double>(counts_));
  update(all_sq_, all_counts_, step_sq_norm);
}

nlohmann::json GradNoiseProbe::log_fields() const {
  auto value = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"gns_b_simple", value(estimator_.b_simple())},
          {"gns_g2", value(estimator_.g2())},
          {"gns_trace", value(estimator_.trace())}};
}

nlohmann::json gns_null_fields() {
  return {{"gns_b_simple", nullptr}, {"gns_g2", nullptr}, {"gns_trace", nullptr}};
}

}  // namespace memo
