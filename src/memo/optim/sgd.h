// SGD with momentum, as torch.optim.SGD (1.13), weight decay as an L2 term in the gradient:
//   d = g + wd p;  buf = d on the first step, else buf = mu buf + (1 - dampening) d;
//   d = nesterov ? d + mu buf : buf  (momentum > 0 only);  p -= lr d.
// Weight decay applies to the tensors marked in `decay`.
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct SgdOptions {
  double momentum = 0.0;   // mu; 0: plain SGD, no state
  double dampening = 0.0;  // torch's dampening; must be 0 with nesterov
  bool nesterov = false;
  double weight_decay = 0.0;  // L2 coefficient added to the gradient
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SgdOptions, momentum, dampening, nesterov,
                                                weight_decay)

class Sgd final : public Optimizer {
 public:
  // decay[i] says whether layout.params()[i] gets weight decay. Throws ConfigError on bad options.
  Sgd(const ParamLayout& layout, SgdOptions options, std::vector<bool> decay, Backend& backend);
  std::string name() const override { return "sgd"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return buf_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  SgdOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> buf_;  // [total_numel] momentum buffer; empty when momentum = 0
  Backend& backend_;       // runs the updates (backend/backend.h)
};

}  // namespace memo
