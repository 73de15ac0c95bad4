// Optimisers update the flat parameter buffer from the flat gradient buffer, one parameter tensor
// (a range of the ParamLayout) at a time, so per-tensor choices (weight decay on matrices only,
// Adafactor's factored moments) are possible. State is exposed as named tensors for checkpoints.
// Not here: learning-rate schedules (train/schedule.h) and gradient clipping (the trainer).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memo/core/tensor.h"
#include "memo/model/params.h"

namespace memo {

struct StateTensor {
  std::string name;  // e.g. "exp_avg.model.norm.weight"
  std::vector<int64_t> shape;
  float* data;
  MemSpace space = MemSpace::kHost;  // where data lives (the backend's device space)
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // The buffer as a flat f32 tensor.
  Tensor tensor() const { return Tensor(data, {numel()}, DType::kF32, space); }
};

// Note [Optimizer state]
// state() lists every fp32 buffer an optimiser keeps, under names "<kind>.<parameter name>" that
// do not change between releases; the step count is steps_done() (saved by the trainer). Writing
// the saved values back through state()'s pointers and calling set_steps_done() restores the
// optimiser exactly: the next step is bit for bit the one the original run would have taken.
// Buffers that the options make unnecessary (momentum 0, Adafactor without beta1) are absent.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update with learning rate lr of the flat f32 buffers `layout` describes (parameters and
  // gradients in the backend's device space); gradients are read, never modified. Increments
  // steps_done().
  virtual void step(Tensor params, ConstTensor grads, double lr) = 0;
  int64_t steps_done() const { return steps_done_; }
  void set_steps_done(int64_t n) { steps_done_ = n; }
  // Every state buffer, for saving and restoring (restoring writes through the pointers).
  virtual std::vector<StateTensor> state() = 0;
  // Bytes of the state buffers as allocated (padding between tensors included, scratch not):
  // what optimizer_state_bytes (optim/factory.h) predicts before the optimiser exists.
  virtual int64_t state_bytes() const = 0;
  // Every option by name (numbers and booleans), for checkpoints and run logs.
  virtual nlohmann::json hyperparameters() const = 0;

 protected:
  int64_t steps_done_ = 0;
};

// Weight decay on matrices (Linear and Embedding weights), none on the RMSNorm weights.
std::vector<bool> decay_matrices_only(const ParamLayout& layout);

}  // namespace memo
