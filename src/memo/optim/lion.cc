#include "memo/optim/lion.h"

#include "memo/optim/checks.h"

namespace memo {

Lion::Lion(const ParamLayout& layout, LionOptions options, std::vector<bool> decay,
           Backend& backend)
    : layout_(layout),
      options_(options),
      decay_(std::move(decay)),
      m_(backend, layout.total_numel()),
      backend_(backend) {
  check_decay_mask(layout, decay_);
  check_option(options_.beta1 >= 0.0 && options_.beta1 <= 1.0, "lion", "beta1", options_.beta1,
               "[0, 1]");
  check_option(options_.beta2 >= 0.0 && options_.beta2 < 1.0, "lion", "beta2", options_.beta2,
               "[0, 1)");
  check_option(options_.weight_decay >= 0.0, "lion", "weight_decay", options_.weight_decay,
               "[0, inf)");
}

void Lion::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  LionStep s;
  s.beta1 = float(options_.beta1);
  s.beta2 = float(options_.beta2);
  s.one_minus_beta1 = float(1.0 - options_.beta1);  // Note [One minus beta]
  s.one_minus_beta2 = float(1.0 - options_.beta2);
  s.lr = float(lr);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    s.keep = decay_[i] ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    backend_.optimizer_kernels().lion_update(params.part(info.offset, {info.numel}),
                                             m_.tensor({info.numel}, info.offset),
                                             grads.part(info.offset, {info.numel}), s);
  }
}

std::vector<StateTensor> Lion::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params())
    out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset, m_.space()});
  return out;
}

}  // namespace memo
