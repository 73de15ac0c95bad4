#include "memo/optim/signsgd.h"

#include "memo/optim/checks.h"

namespace memo {

SignSgd::SignSgd(const ParamLayout& layout, SignSgdOptions options, std::vector<bool> decay,
                 Backend& backend)
    : layout_(layout), options_(options), decay_(std::move(decay)), backend_(backend) {
  check_decay_mask(layout, decay_);
  check_option(options_.momentum >= 0.0 && options_.momentum < 1.0, "signsgd", "momentum",
               options_.momentum, "[0, 1)");
  check_option(options_.weight_decay >= 0.0, "signsgd", "weight_decay", options_.weight_decay,
               "[0, inf)");
  if (options_.momentum > 0.0) m_ = SpaceArray<float>(backend_, layout.total_numel());
}

void SignSgd::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  SignSgdStep s;
  s.momentum = float(options_.momentum);
  s.one_minus_momentum = float(1.0 - options_.momentum);
  s.lr = float(lr);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    s.keep = decay_[i] ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    const Tensor m = options_.momentum == 0.0 ? Tensor() : m_.tensor({info.numel}, info.offset);
    backend_.optimizer_kernels().signsgd_update(params.part(info.offset, {info.numel}), m,
                                                grads.part(info.offset, {info.numel}), s);
  }
}

std::vector<StateTensor> SignSgd::state() {
  std::vector<StateTensor> out;
  if (options_.momentum == 0.0) return out;
  for (const ParamInfo& info : layout_.params())
    out.push_back(
        {"momentum_buffer." + info.name, info.shape, m_.data() + info.offset, m_.space()});
  return out;
}

}  // namespace memo
