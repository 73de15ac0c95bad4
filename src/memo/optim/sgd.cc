#include "memo/optim/sgd.h"

#include "memo/optim/checks.h"

namespace memo {

Sgd::Sgd(const ParamLayout& layout, SgdOptions options, std::vector<bool> decay, Backend& backend)
    : layout_(layout), options_(options), decay_(std::move(decay)), backend_(backend) {
  check_decay_mask(layout, decay_);
  check_option(options_.momentum >= 0.0 && options_.momentum < 1.0, "sgd", "momentum",
               options_.momentum, "[0, 1)");
  check_option(options_.dampening >= 0.0 && options_.dampening <= 1.0, "sgd", "dampening",
               options_.dampening, "[0, 1]");
  check_option(options_.weight_decay >= 0.0, "sgd", "weight_decay", options_.weight_decay,
               "[0, inf)");
  if (options_.nesterov && (options_.momentum == 0.0 || options_.dampening != 0.0))
    throw ConfigError(str("sgd option nesterov needs momentum > 0 and dampening = 0 (got momentum ",
                          options_.momentum, ", dampening ", options_.dampening, ")"));
  if (options_.momentum > 0.0) buf_ = SpaceArray<float>(backend_, layout.total_numel());
}

void Sgd::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  SgdStep s;
  s.first = steps_done_ == 1;  // torch starts the buffer at d, not at (1 - damp) d
  s.momentum = float(options_.momentum);
  s.keep_grad = float(1.0 - options_.dampening);
  s.nesterov = options_.nesterov;
  s.lr = float(lr);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    s.weight_decay = decay_[i] ? float(options_.weight_decay) : 0.0f;
    const Tensor buf = options_.momentum == 0.0 ? Tensor() : buf_.tensor({info.numel}, info.offset);
    backend_.optimizer_kernels().sgd_update(params.part(info.offset, {info.numel}), buf,
                                            grads.part(info.offset, {info.numel}), s);
  }
}

std::vector<StateTensor> Sgd::state() {
  std::vector<StateTensor> out;
  if (options_.momentum == 0.0) return out;
  for (const ParamInfo& info : layout_.params())
    out.push_back(
        {"momentum_buffer." + info.name, info.shape, buf_.data() + info.offset, buf_.space()});
  return out;
}

}  // namespace memo
