// One GPT-2 block (Hugging Face GPT2Block, Megatron's GPT layer): LayerNorm, causal multi-head
// self-attention with a fused c_attn projection (biases; RoPE on q and k only with rotary
// positions), c_proj, residual, LayerNorm, c_fc, tanh GELU, c_proj, residual. Weights stay in
// the Conv1D layout [in, out] of the checkpoint (y = x W + b). Reached through layer_forward,
// layer_recompute_tokens and layer_backward (model/layer.h), which dispatch on ModelConfig::arch;
// the contracts are theirs, with SavedActs used as layer.h documents for GPT-2.
#pragma once

#include <cstdint>

#include "memo/core/tensor.h"
#include "memo/model/layer.h"
#include "memo/model/params.h"

namespace memo {

// Fills every GPT-2 field of s but x; y = h + gelu(c_fc(ln_2(h))) c_proj. y: [T, C]
void gpt_layer_forward(Tensor y, const SavedActs& s, const LayerWeights& w,
                       const LayerContext& ctx);

// Rebuilds rows [row_begin, row_end) of every per-token GPT-2 field from s.x and s.attn, bit for
// bit as gpt_layer_forward wrote them (row_begin a multiple of the backend's reproducible_rows()).
void gpt_layer_recompute_tokens(const SavedActs& s, int64_t row_begin, int64_t row_end,
                                const LayerWeights& w, const LayerContext& ctx);

// dres: dL/dy in, dL/dx out (in place); weight and bias gradients accumulate into dw.
void gpt_layer_backward(Tensor dres, const LayerWeights& dw, const SavedActs& s,
                        const LayerWeights& w, const LayerContext& ctx);

}  // namespace memo
