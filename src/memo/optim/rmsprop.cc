#include "memo/optim/rmsprop.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

Rmsprop::Rmsprop(const ParamLayout& layout, RmspropOptions options, std::vector<bool> decay,
                 Backend& backend)
    : layout_(layout),
      options_(options),
      decay_(std::move(decay)),
      square_avg_(backend, layout.total_numel()),
      backend_(backend) {
  check_decay_mask(layout, decay_);
  check_option(options_.alpha >= 0.0 && options_.alpha < 1.0, "rmsprop", "alpha", options_.alpha,
               "[0, 1)");
  check_option(options_.eps > 0.0, "rmsprop", "eps", options_.eps, "(0, inf)");
  check_option(options_.momentum >= 0.0 && options_.momentum < 1.0, "rmsprop", "momentum",
               options_.momentum, "[0, 1)");
  check_option(options_.weight_decay >= 0.0, "rmsprop", "weight_decay", options_.weight_decay,
               "[0, inf)");
  if (options_.centered) grad_avg_ = SpaceArray<float>(backend_, layout.total_numel());
  if (options_.momentum > 0.0) buf_ = SpaceArray<float>(backend_, layout.total_numel());
}

void Rmsprop::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  RmspropStep s;
  s.alpha = float(options_.alpha);
  s.one_minus_alpha = float(1.0 - options_.alpha);
  s.eps = float(options_.eps);
  s.momentum = float(options_.momentum);
  s.lr = float(lr);
  s.centered = options_.centered;
  const bool use_momentum = options_.momentum > 0.0;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    s.weight_decay = decay_[i] ? float(options_.weight_decay) : 0.0f;
    const Tensor a = options_.centered ? grad_avg_.tensor({info.numel}, info.offset) : Tensor();
    const Tensor b = use_momentum ? buf_.tensor({info.numel}, info.offset) : Tensor();
    backend_.optimizer_kernels().rmsprop_update(params.part(info.offset, {info.numel}),
                                                square_avg_.tensor({info.numel}, info.offset), a, b,
                                                grads.part(info.offset, {info.numel}), s);
  }
}

std::vector<StateTensor> Rmsprop::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params()) {
    out.push_back({"square_avg." + info.name, info.shape, square_avg_.data() + info.offset,
                   square_avg_.space()});
    if (options_.centered)
      out.push_back(
          {"grad_avg." + info.name, info.shape, grad_avg_.data() + info.offset, grad_avg_.space()});
    if (options_.momentum > 0.0)
      out.push_back(
          {"momentum_buffer." + info.name, info.shape, buf_.data() + info.offset, buf_.space()});
  }
  return out;
}

}  // namespace memo
