// Activation strategies: where each layer's skeletal tensors (SavedActs) live between its forward
// and its backward. The model calls these hooks in a fixed order and never branches on which
// strategy runs; strategies must not change any computed value (DESIGN.md section 6).
//   forward:  slot(l+1) requested before layer l runs (layer l writes its output into it),
//             forward_done(l) after layer l's forward;
//   backward: backward_ready(l) before layer l's backward, backward_done(l) after it;
//   eval:     discard(l) instead of the backward.
// This file holds the interface and `keep` (every skeletal tensor stays on the device). The
// recompute, offload and memo strategies (issue #3) implement the same interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/model/config.h"
#include "memo/model/layer.h"

namespace memo {

class ActivationStrategy {
 public:
  virtual ~ActivationStrategy() = default;
  virtual std::string name() const = 0;
  // Called once per micro-batch shape before the first layer; may plan or allocate.
  virtual void begin_step(int64_t batch, int64_t seq) = 0;
  // Buffers for layer l's skeletal set; x is written by the producer of the layer's input.
  virtual const SavedActs& forward_slot(int layer) = 0;
  virtual void forward_done(int layer) = 0;
  virtual const SavedActs& backward_ready(int layer) = 0;
  virtual void backward_done(int layer) = 0;
  virtual void discard(int layer) = 0;
};

class KeepStrategy final : public ActivationStrategy {
 public:
  KeepStrategy(const ModelConfig& config, ActivationAllocator& alloc)
      : config_(config), alloc_(alloc), slots_(size_t(config.num_hidden_layers)),
        live_(size_t(config.num_hidden_layers), false) {}
  ~KeepStrategy() override;
  std::string name() const override { return "keep"; }
  void begin_step(int64_t batch, int64_t seq) override;
  const SavedActs& forward_slot(int layer) override;
  void forward_done(int layer) override {}
  const SavedActs& backward_ready(int layer) override;
  void backward_done(int layer) override { release(layer); }
  void discard(int layer) override { release(layer); }

 private:
  void release(int layer);
  const ModelConfig& config_;
  ActivationAllocator& alloc_;
  int64_t batch_ = 0, seq_ = 0;
  std::vector<SavedActs> slots_;
  std::vector<bool> live_;
};

}  // namespace memo
