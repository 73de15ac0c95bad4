// AdamW (Loshchilov & Hutter 2019) with PyTorch's update order (torch.optim.AdamW, 1.13):
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Weight decay applies to the tensors marked in `decay` (by default the matrices, not the norms).
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;  // the usual LLM choice (LLaMA); torch's default is 0.999
  double eps = 1e-8;
  double weight_decay = 0.1;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AdamWOptions, beta1, beta2, eps, weight_decay)

class AdamW final : public Optimizer {
 public:
  // decay[i] says whether layout.params()[i] gets weight decay. Throws ConfigError on bad options.
  AdamW(const ParamLayout& layout, AdamWOptions options, std::vector<bool> decay, Backend& backend);
  std::string name() const override { return "adamw"; }
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return m_.bytes() + v_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  const ParamLayout& layout_;
  AdamWOptions options_;
  std::vector<bool> decay_;
  SpaceArray<float> m_;  // [total_numel] first moment, same layout as the parameters
  SpaceArray<float> v_;  // [total_numel] second moment
  Backend& backend_;     // runs the updates (backend/backend.h)
};

}  // namespace memo
