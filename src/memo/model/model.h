// The decoder-only model: embedding, L layers, final RMSNorm, LM head (tied or untied) and softmax
// cross-entropy, with its parameters and gradients in two flat buffers (model/params.h).
// forward_backward runs one micro-batch and accumulates gradients; the optimiser step, clipping
// and accumulation over micro-batches belong to the trainer.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "memo/backend/allocator.h"
#include "memo/core/buffer.h"
#include "memo/memory/strategy.h"
#include "memo/model/config.h"
#include "memo/model/layer.h"
#include "memo/model/params.h"

namespace memo {

class Model {
 public:
  explicit Model(const ModelConfig& config);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  int64_t params_numel() const { return params_.numel(); }  // with padding (zero in both)
  const ModelWeights& weights() const { return w_; }
  const ModelWeights& grad_weights() const { return dw_; }

  void init(uint64_t seed) { init_weights(layout_, params_.data(), config_.initializer_range, seed); }
  void zero_grads();

  // One micro-batch of `batch` sequences of `seq` tokens: inputs and targets are [batch * seq].
  // Gradients accumulate (+=) scaled by grad_scale (1 / tokens per optimiser step gives the mean).
  // Returns the sum of the token losses.
  double forward_backward(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                          float grad_scale, ActivationStrategy& strategy,
                          ActivationAllocator& alloc);
  // Forward only; returns the sum of the token losses.
  double forward_loss(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                      ActivationStrategy& strategy, ActivationAllocator& alloc);

 private:
  double run(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
             float grad_scale, bool backward, ActivationStrategy& strategy,
             ActivationAllocator& alloc);
  // Head and loss over token chunks so the [T, V] logits never exist whole. Fills dxf (if
  // backward) and returns the loss sum.
  double head_and_loss(Tensor dxf, ConstTensor xf, const int32_t* targets, int64_t tokens,
                       float grad_scale, bool backward, ActivationAllocator& alloc);
  const std::pair<AlignedBuffer<float>, AlignedBuffer<float>>& rope_tables(int64_t seq);

  ModelConfig config_;
  ParamLayout layout_;
  AlignedBuffer<float> params_;
  AlignedBuffer<float> grads_;
  ModelWeights w_;
  ModelWeights dw_;
  std::map<int64_t, std::pair<AlignedBuffer<float>, AlignedBuffer<float>>> rope_;  // seq -> cos, sin
};

// Model FLOPs of one training step per token (forward + backward = 3 x forward), counting the
// causal attention at half the full S x S product, as is usual for MFU. See model/model.cc.
double train_flops_per_token(const ModelConfig& config, int64_t seq);

}  // namespace memo
