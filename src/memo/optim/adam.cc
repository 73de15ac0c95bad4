#include "memo/optim/adam.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

void check_adam_options(const std::string& optimizer, double beta1, double beta2, double eps,
                        double weight_decay) {
  check_option(beta1 >= 0.0 && beta1 < 1.0, optimizer, "beta1", beta1, "[0, 1)");
  check_option(beta2 >= 0.0 && beta2 < 1.0, optimizer, "beta2", beta2, "[0, 1)");
  check_option(eps > 0.0, optimizer, "eps", eps, "(0, inf)");
  check_option(weight_decay >= 0.0, optimizer, "weight_decay", weight_decay, "[0, inf)");
}

Adam::Adam(const ParamLayout& layout, AdamOptions options, std::vector<bool> decay,
           Backend& backend)
    : layout_(layout),
      options_(options),
      decay_(std::move(decay)),
      m_(backend, layout.total_numel()),
      v_(backend, layout.total_numel()),
      backend_(backend) {
  check_decay_mask(layout, decay_);
  check_adam_options("adam", options_.beta1, options_.beta2, options_.eps, options_.weight_decay);
}

void Adam::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  const double t = double(steps_done_);
  AdamStep s;
  s.beta1 = float(options_.beta1);
  s.beta2 = float(options_.beta2);
  s.one_minus_beta1 = float(1.0 - options_.beta1);  // Note [One minus beta]
  s.one_minus_beta2 = float(1.0 - options_.beta2);
  s.eps = float(options_.eps);
  s.bias2_sqrt = float(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  s.step_size = float(lr / (1.0 - std::pow(options_.beta1, t)));
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    s.weight_decay = decay_[i] ? float(options_.weight_decay) : 0.0f;
    backend_.optimizer_kernels().adam_update(
        params.part(info.offset, {info.numel}), m_.tensor({info.numel}, info.offset),
        v_.tensor({info.numel}, info.offset), grads.part(info.offset, {info.numel}), s);
  }
}

std::vector<StateTensor> Adam::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params()) {
    out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset, m_.space()});
    out.push_back({"exp_avg_sq." + info.name, info.shape, v_.data() + info.offset, v_.space()});
  }
  return out;
}

}  // namespace memo
