// Adam (Kingma & Ba 2015) as torch.optim.Adam (1.13, amsgrad off), weight decay as an L2 term
// added to the gradient (not decoupled: that is AdamW, adamw.h):
//   d = g + wd p;  m = b1 m + (1 - b1) d;  v = b2 v + (1 - b2) d^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Weight decay applies to the tensors marked in `decay`.
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;  // torch's default
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 coefficient added to the gradient
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AdamOptions, beta1, beta2, eps, weight_decay)

class Adam final : public Optimizer {
 public:
  Adam(const ParamLayout& layout, AdamOptions options, std::vector<bool> decay, Backend& backend);
  std::string name() const override { return "adam"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return m_.bytes() + v_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  AdamOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> m_;  // [total_numel] first moment, same layout as the parameters
  SpaceArray<float> v_;  // [total_numel] second moment
  Backend& backend_;     // runs the updates (backend/backend.h)
};

// Throws ConfigError unless 0 <= beta1 < 1, 0 <= beta2 < 1, eps > 0, weight_decay >= 0.
void check_adam_options(const std::string& optimizer, double beta1, double beta2, double eps,
                        double weight_decay);

}  // namespace memo
