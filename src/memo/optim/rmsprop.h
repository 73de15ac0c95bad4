// RMSprop (Tieleman & Hinton 2012) as torch.optim.RMSprop (1.13), weight decay as an L2 term:
//   d = g + wd p;  v = alpha v + (1 - alpha) d^2;
//   centered: a = alpha a + (1 - alpha) d,  den = sqrt(v - a^2) + eps;  else den = sqrt(v) + eps;
//   momentum > 0: buf = mu buf + d / den,  p -= lr buf;  else p -= lr d / den.
// Weight decay on the tensors marked in `decay`.
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct RmspropOptions {
  double alpha = 0.99;  // decay of the squared-gradient average
  double eps = 1e-8;
  double momentum = 0.0;      // mu; 0: no momentum buffer
  bool centered = false;      // divide by the estimated std instead of the RMS
  double weight_decay = 0.0;  // L2 coefficient added to the gradient
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RmspropOptions, alpha, eps, momentum, centered,
                                                weight_decay)

class Rmsprop final : public Optimizer {
 public:
  Rmsprop(const ParamLayout& layout, RmspropOptions options, std::vector<bool> decay,
          Backend& backend);
  std::string name() const override { return "rmsprop"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override {
    return square_avg_.bytes() + grad_avg_.bytes() + buf_.bytes();
  }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  RmspropOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> square_avg_;  // [total_numel] v
  SpaceArray<float> grad_avg_;    // [total_numel] a; empty unless centered
  SpaceArray<float> buf_;         // [total_numel] momentum buffer; empty unless momentum > 0
  Backend& backend_;              // runs the updates (backend/backend.h)
};

}  // namespace memo
