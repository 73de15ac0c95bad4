#include "memo/optim/adagrad.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

Adagrad::Adagrad(const ParamLayout& layout, AdagradOptions options, std::vector<bool> decay,
                 Backend& backend)
    : layout_(layout),
      options_(options),
      decay_(std::move(decay)),
      sum_(backend, layout.total_numel()),
      backend_(backend) {
  check_decay_mask(layout, decay_);
  check_option(options_.lr_decay >= 0.0, "adagrad", "lr_decay", options_.lr_decay, "[0, inf)");
  check_option(options_.initial_accumulator_value >= 0.0, "adagrad", "initial_accumulator_value",
               options_.initial_accumulator_value, "[0, inf)");
  check_option(options_.eps > 0.0, "adagrad", "eps", options_.eps, "(0, inf)");
  check_option(options_.weight_decay >= 0.0, "adagrad", "weight_decay", options_.weight_decay,
               "[0, inf)");
  const float init = float(options_.initial_accumulator_value);
  backend_.fill(sum_.tensor({sum_.numel()}), init);
}

void Adagrad::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  AdagradStep s;
  s.lr = float(lr / (1.0 + double(steps_done_ - 1) * options_.lr_decay));
  s.eps = float(options_.eps);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    s.weight_decay = decay_[i] ? float(options_.weight_decay) : 0.0f;
    backend_.optimizer_kernels().adagrad_update(params.part(info.offset, {info.numel}),
                                                sum_.tensor({info.numel}, info.offset),
                                                grads.part(info.offset, {info.numel}), s);
  }
}

std::vector<StateTensor> Adagrad::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params())
    out.push_back({"sum." + info.name, info.shape, sum_.data() + info.offset, sum_.space()});
  return out;
}

}  // namespace memo
