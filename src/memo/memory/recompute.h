// `recompute`: full recomputation, Megatron style. Only each layer's input x stays on the device (L
// tensors of [T, C]); every other skeletal tensor is written into one shared work slot during the
// forward and thrown away. Before layer l's backward its forward is re-run into the work slot by
// the layer's forward itself (the output goes to a scratch [T, C] transient), so the values are the
// forward's bit for bit. The top layer skips the re-run: the slot still holds its forward. A parked
// micro-batch (a pipeline chunk: ActivationStrategy::park) gives the work slot back between its
// forward and its backward, and re-runs its top layer too.
#pragma once

#include <vector>

#include "memo/memory/strategy.h"

namespace memo {

class RecomputeStrategy final : public ActivationStrategy {
 public:
  RecomputeStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc);
  ~RecomputeStrategy() override;
  std::string name() const override { return "recompute"; }
  std::string summary() const override;
  void begin_step(int64_t batch, int64_t seq) override;
  void bind_layers(const LayerRunner& layers) override;
  const SavedActs& forward_slot(int layer) override;
  void forward_done(int layer) override {}
  const SavedActs& backward_ready(int layer) override;
  void backward_done(int layer) override;
  void discard(int layer) override;
  void park() override;

 private:
  void acquire_work();
  void release_x(int layer);
  void release_work();

  const SkeletalLayout layout_;
  ActivationAllocator& alloc_;
  int64_t batch_ = 0, seq_ = 0;
  int first_ = 0, end_ = 0;  // the micro-batch's layers [first_, end_) (set_layer_range)
  const LayerRunner* layers_ = nullptr;
  SavedActs work_;                // every field but x; [T, ...], held for the micro-batch
  std::vector<SavedActs> slots_;  // layer l: its own x + the work slot
  std::vector<bool> x_live_;
  bool work_live_ = false;
  bool parked_run_ = false;  // the micro-batch was set parked (its top layer is re-run too)
  bool parked_ = false;      // between park() and the first backward_ready
};

}  // namespace memo
