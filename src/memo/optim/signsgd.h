// Sign descent (signSGD, Bernstein et al. 2018); with momentum it is Signum (their Algorithm 2):
//   p *= 1 - lr wd;  m = beta m + (1 - beta) g;  p -= lr sign(m)   (sign(0) = 0).
// Decoupled weight decay on the tensors marked in `decay`. With momentum 0 the update is
// sign(g), the "V = sign(G_est)" of the surge paper (App. A, Eq. 29).
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct SignSgdOptions {
  double momentum = 0.0;      // beta; 0: signSGD (no state), 0.9: Signum's usual value
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr wd
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SignSgdOptions, momentum, weight_decay)

class SignSgd final : public Optimizer {
 public:
  SignSgd(const ParamLayout& layout, SignSgdOptions options, std::vector<bool> decay,
          Backend& backend);
  std::string name() const override { return "signsgd"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return m_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  SignSgdOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> m_;  // [total_numel] momentum; empty when momentum = 0
  Backend& backend_;     // runs the updates (backend/backend.h)
};

}  // namespace memo
