// Optimisers update the flat parameter buffer from the flat gradient buffer, one parameter tensor
// (a range of the ParamLayout) at a time, so per-tensor choices (weight decay on matrices only,
// Adafactor's factored moments) are possible. State is exposed as named tensors for checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/tensor.h"
#include "memo/model/params.h"

namespace memo {

struct StateTensor {
  std::string name;            // e.g. "exp_avg.model.norm.weight"
  std::vector<int64_t> shape;
  float* data;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update with learning rate lr; gradients are read, never modified.
  virtual void step(float* params, const float* grads, double lr) = 0;
  int64_t steps_done() const { return steps_done_; }
  void set_steps_done(int64_t n) { steps_done_ = n; }
  // Every state buffer, for saving and restoring (restoring writes through the pointers).
  virtual std::vector<StateTensor> state() = 0;

 protected:
  int64_t steps_done_ = 0;
};

}  // namespace memo
