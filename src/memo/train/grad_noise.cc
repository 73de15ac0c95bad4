#include "memo/train/grad_noise.h"

#include "memo/core/error.h"
#include "memo/kernels/cpu/tensor_ops.h"

namespace memo {

GradNoiseProbe::GradNoiseProbe(int64_t numel, int64_t micro_steps, int64_t micro_tokens,
                               scaling::NoiseScaleOptions options)
    : numel_(numel),
      micro_steps_(micro_steps),
      micro_tokens_(micro_tokens),
      estimator_(options),
      sum_(numel),
      micro_sq_(size_t(micro_steps), 0.0) {
  MEMO_CHECK(micro_steps >= 2 && micro_tokens > 0, "noise probe needs >= 2 micro-batches, got ",
             micro_steps, " of ", micro_tokens, " tokens");
}

void GradNoiseProbe::before_micro(float* grads, int64_t micro) {
  // micro 0 starts from the trainer's zeroed buffer; later ones must see only their own gradient
  if (micro > 0) cpu::fill(Tensor(grads, {numel_}), 0.0f);
}

void GradNoiseProbe::after_micro(float* grads, int64_t micro) {
  const double k = double(micro_steps_);
  // see Note [Noise-scale accounting]: the buffer holds g_i / k
  micro_sq_[size_t(micro)] = k * k * cpu::sum_squares(ConstTensor(grads, {numel_}));
  Tensor g(grads, {numel_}), sum(sum_.data(), {numel_});
  if (micro == 0)
    cpu::copy(sum, g);
  else if (micro + 1 < micro_steps_)
    cpu::add_into(sum, g);
  else
    cpu::add_into(g, sum);  // the last: the model's buffer ends holding the step's gradient
}

void GradNoiseProbe::end_step(double step_sq_norm) {
  estimator_.update(micro_sq_, step_sq_norm, double(micro_tokens_));
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
