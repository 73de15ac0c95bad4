// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2):
//   c = b1 m + (1 - b1) g;  p -= lr (sign(c) + wd p);  m = b2 m + (1 - b2) g   (sign(0) = 0).
// Decoupled weight decay on the tensors marked in `decay`.
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct LionOptions {
  double beta1 = 0.9;   // interpolation for the update direction
  double beta2 = 0.99;  // momentum decay
  double weight_decay =
      0.0;  // decoupled; the paper uses 3-10x AdamW's value with a 3-10x smaller lr
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LionOptions, beta1, beta2, weight_decay)

class Lion final : public Optimizer {
 public:
  Lion(const ParamLayout& layout, LionOptions options, std::vector<bool> decay, Backend& backend);
  std::string name() const override { return "lion"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return m_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  LionOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> m_;  // [total_numel] momentum
  Backend& backend_;     // runs the updates (backend/backend.h)
};

}  // namespace memo
