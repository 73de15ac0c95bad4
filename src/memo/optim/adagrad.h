// Adagrad (Duchi et al. 2011) as torch.optim.Adagrad (1.13), weight decay as an L2 term:
//   d = g + wd p;  clr = lr / (1 + (t - 1) lr_decay);  s += d^2;  p -= clr d / (sqrt(s) + eps),
// with s starting at initial_accumulator_value. Weight decay on the tensors marked in `decay`.
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct AdagradOptions {
  double lr_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  double weight_decay = 0.0;  // L2 coefficient added to the gradient
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AdagradOptions, lr_decay, initial_accumulator_value,
                                                eps, weight_decay)

class Adagrad final : public Optimizer {
 public:
  Adagrad(const ParamLayout& layout, AdagradOptions options, std::vector<bool> decay,
          Backend& backend);
  std::string name() const override { return "adagrad"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return sum_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  AdagradOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> sum_;  // [total_numel] running sum of squared gradients
  Backend& backend_;       // runs the updates (backend/backend.h)
};

}  // namespace memo
