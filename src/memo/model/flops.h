// The one FLOP count of memo (Note [Model FLOPs]): MFU in memo train and memo bench, step times
// and MFU in memo plan --gpus. Counts, not measurements: no kernel is timed here.
#pragma once

#include <cstdint>

#include "memo/model/config.h"

namespace memo {

// Note [Model FLOPs]
// Per token, forward, of the whole (unsharded) model at sequence length S. A multiply-add is 2
// FLOPs. Each layer's products are 2 x the layer's matrix parameters (q, k, v, o and the MLP's
// two or three matrices; GPT-2's fused c_attn is its q, k, v); biases, norms, activations, RoPE
// and the position add are left out. Causal attention is 2 H D (S + 1): q.k and p.v, 2 FLOPs per
// multiply-add of each of the H D query columns, over (S + 1) / 2 keys on average (the kernels
// skip masked tiles); the whole S x S is 4 H D S. A layer with a sliding window W < S sees
// min(i + 1, W) keys from query i, (W (W + 1) / 2 + (S - W) W) / S on average, and W in the
// whole-matrix count (the kernels skip the tiles outside the window too); attn_causal and
// attn_full are the means over the layers. Document masks are not counted: they are data, and
// MFU counts the model's causal work over the whole window. The head is 2 C V. A training step
// is 3 x forward (the backward's products are twice the forward's), and model FLOPs never count
// recomputation: MFU is tokens x train_causal() / (seconds x peak), and memo plan --gpus prints
// it also with train_noncausal() (the convention of Korthikanti et al. 2022, ~2x at 1M tokens).
// Without a window every term is a whole number, exact in a double.
struct ModelFlops {
  double layers = 0.0;         // L
  double layer_matmul = 0.0;   // one layer's products
  double layer_rebuild = 0.0;  // of which memo's token-wise rebuild repeats: all but the last
  double attn_causal = 0.0;    // one layer's attention, causal
  double attn_full = 0.0;      // the same over the whole S x S
  double head = 0.0;
  double train_causal() const { return 3.0 * (layers * (layer_matmul + attn_causal) + head); }
  double train_noncausal() const { return 3.0 * (layers * (layer_matmul + attn_full) + head); }
};

ModelFlops model_flops(const ModelConfig& config, int64_t seq);

// Model FLOPs of one training step per token: model_flops(config, seq).train_causal().
double train_flops_per_token(const ModelConfig& config, int64_t seq);

}  // namespace memo
