// Activation strategies: where each layer's skeletal tensors (SavedActs) live between its forward
// and its backward. The model calls these hooks in a fixed order and never branches on which
// strategy runs; strategies must not change any computed value (DESIGN.md section 6).
//   forward:  slot(l+1) requested before layer l runs (layer l writes its output into it),
//             forward_done(l) after layer l's forward;
//   backward: backward_ready(l) before layer l's backward, backward_done(l) after it;
//   eval:     discard(l) instead of the backward.
// forward_slot(l) is called twice per forward: first (before layer l-1 runs) only its x is
// written; the second call comes right before layer l's forward, which writes every other field.
// This file holds the interface and `keep` (every skeletal tensor stays on the device). The
// recompute, offload and memo strategies implement the same interface in their own files;
// make_strategy (memory/strategy_factory.h) picks one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/memory/skeletal.h"

namespace memo {

class ActivationStrategy {
 public:
  virtual ~ActivationStrategy() = default;
  virtual std::string name() const = 0;
  // Called first in every micro-batch with the layers that run it: how to rebuild a layer's
  // skeletal tensors (recompute, memo) and the backend (its streams, host memory and reproducible
  // rows). `layers` stays valid until the micro-batch ends.
  virtual void bind_layers(const LayerRunner& layers) = 0;
  // Called once per micro-batch right after bind_layers, before the first layer; may plan or
  // allocate.
  virtual void begin_step(int64_t batch, int64_t seq) = 0;
  // Buffers for layer l's skeletal set; x is written by the producer of the layer's input.
  virtual const SavedActs& forward_slot(int layer) = 0;
  virtual void forward_done(int layer) = 0;
  virtual const SavedActs& backward_ready(int layer) = 0;
  virtual void backward_done(int layer) = 0;
  virtual void discard(int layer) = 0;

  // Most host bytes held at once (0 for strategies that keep everything on the device).
  virtual int64_t host_peak_bytes() const { return 0; }
  // The copies' seconds so far (both copy streams busy) and the compute stream's seconds waiting
  // on them: per step, 1 - wait / copy is the fraction of copy time hidden under compute. Zero for
  // strategies that copy nothing.
  struct CopyTime {
    double copy_s = 0.0, wait_s = 0.0;
  };
  virtual CopyTime copy_time() const { return {}; }
  // True while a warm-up micro-batch (run, then its gradients dropped) should precede step 1 so
  // the strategy can profile (memo's cost model, memory/alpha.h).
  virtual bool wants_warmup() const { return false; }
  // One line for the start-of-run log: the strategy and its parameters.
  virtual std::string summary() const { return name(); }

  // The layers [first, last) the next micro-batch runs, called before bind_layers: a pipeline
  // chunk's (Note [Pipeline parts] in model/model.h), whose forward ends at layer last - 1 and
  // whose backward ends at layer first. Without a call, or with last = -1: every layer.
  // `parked`: the micro-batch's backward does not follow its forward (a pipeline chunk below the
  // last, whose backward waits for the stages after it while other micro-batches run), so the
  // model calls park() after the last forward_done, and the strategy may free the device between
  // the two (Note [Parked micro-batches] in memory/swap_strategy.cc).
  virtual void set_layer_range(int first, int last, bool parked = false) {
    range_first_ = first;
    range_last_ = last;
    range_parked_ = parked;
  }
  // After a parked micro-batch's forward: hold as little on the device as the strategy can until
  // its first backward_ready, which brings back what the backward needs. keep holds everything.
  virtual void park() {}

 protected:
  int range_first_ = 0, range_last_ = -1;
  bool range_parked_ = false;
};

class KeepStrategy final : public ActivationStrategy {
 public:
  KeepStrategy(const SkeletalLayout& layout, ActivationAllocator& alloc)
      : layout_(layout),
        alloc_(alloc),
        slots_(size_t(layout.num_layers)),
        live_(size_t(layout.num_layers), false) {}
  ~KeepStrategy() override;
  std::string name() const override { return "keep"; }
  void begin_step(int64_t batch, int64_t seq) override;
  void bind_layers(const LayerRunner&) override {}  // keeps everything
  const SavedActs& forward_slot(int layer) override;
  void forward_done(int layer) override {}
  const SavedActs& backward_ready(int layer) override;
  void backward_done(int layer) override { release(layer); }
  void discard(int layer) override { release(layer); }

 private:
  void release(int layer);
  const SkeletalLayout layout_;
  ActivationAllocator& alloc_;
  int64_t batch_ = 0, seq_ = 0;
  std::vector<SavedActs> slots_;
  std::vector<bool> live_;
};

}  // namespace memo
