// One LLaMA decoder layer (the three entry points dispatch GPT-2 configs to model/gpt_layer.h):
// RMSNorm, causal GQA self-attention with RoPE, residual, RMSNorm, SwiGLU MLP, residual. Forward
// and backward are straight lists of kernel calls in the order of the math. Skeletal tensors (what
// the backward reads) live in SavedActs, placed by the activation strategy (memory/strategy.h);
// transients come from the ActivationAllocator. The layer never branches on the memory strategy.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "memo/backend/allocator.h"
#include "memo/backend/backend.h"
#include "memo/core/tensor.h"
#include "memo/model/config.h"
#include "memo/model/parallel.h"
#include "memo/model/params.h"

namespace memo {

// What layer_backward reads; shapes per micro-batch, T = B*S tokens. Every field except x is
// written by layer_forward; x is the layer input, written by whoever produced it.
// The union of both architectures' sets: saved_fields(config) lists the fields one uses. For GPT-2
// (model/gpt_layer.h) inv_rms1/2 hold LayerNorm's rstd beside mean1/2, gate holds the pre-GELU
// c_fc output and act the GELU output; up is unused. q, k, v are after RoPE only with rotary
// positions.
struct SavedActs {
  Tensor x;         // [T, C]     layer input: starts every recompute; always offloaded
  Tensor xn1;       // [T, C]     input_layernorm(x)
  Tensor inv_rms1;  // [T]        1/rms of x, for the norm's backward (GPT-2: rstd of ln_1)
  Tensor q;         // [T, H*D]   queries after RoPE
  Tensor k;         // [T, Hkv*D] keys after RoPE
  Tensor v;         // [T, Hkv*D] values
  Tensor attn;      // [T, H*D]   attention output: O(S^2) to rebuild, never recomputed
  Tensor lse;       // [B, H, S]  attention log-sum-exp, travels with attn
  Tensor h;         // [T, C]     residual stream after attention: x + attn o_proj
  Tensor xn2;       // [T, C]     post_attention_layernorm(h)
  Tensor inv_rms2;  // [T]        (GPT-2: rstd of ln_2)
  Tensor gate;      // [T, F]     gate_proj(xn2) (GPT-2: c_fc(xn2), before the GELU)
  Tensor up;        // [T, F]     up_proj(xn2) (LLaMA only)
  Tensor act;       // [T, F]     silu(gate) * up (GPT-2: gelu(c_fc(xn2)))
  Tensor mean1;     // [T]        GPT-2 only: mean of x, for ln_1's backward
  Tensor mean2;     // [T]        GPT-2 only: mean of h, for ln_2's backward
};

// The fields of SavedActs in a fixed order with their shapes, so strategies can allocate, copy
// and account for them without naming each one.
struct SavedField {
  const char* name;
  Tensor SavedActs::*member;
  bool per_token;  // a [T, ...] tensor rebuildable token by token (all but x, attn, lse)
};
// The most fields an architecture saves (GPT-2: 15; LLaMA: 14), for fixed-size per-field arrays.
inline constexpr int kNumSavedFields = 15;
// The fields config's architecture saves, x first, in allocation order.
std::span<const SavedField> saved_fields(const ModelConfig& config);
Shape saved_shape(const SavedField& field, const ModelConfig& config, int64_t batch, int64_t seq);
int64_t saved_acts_bytes(const ModelConfig& config, int64_t batch, int64_t seq);

// Whether a GPU run in bf16 mixed precision keeps the activation of this request name in fp32: the
// per-token statistics (1/rms, LayerNorm mean and rstd, attention log-sum-exp), the loss path
// (final norm statistics, logits chunk, token losses) and the attention kernel's scratch. Every
// other activation is bf16. For planning GPU memory (train/cluster_plan.h).
bool activation_stays_fp32(std::string_view name);

// Everything a layer needs besides weights and saved activations.
struct LayerContext {
  const ModelConfig* config;
  int64_t batch;               // B sequences in the micro-batch
  int64_t seq;                 // S tokens per sequence
  ConstTensor rope_cos;        // [S, D/2]; empty with learned positions
  ConstTensor rope_sin;        // [S, D/2]; empty with learned positions
  ActivationAllocator* alloc;  // transients
  Backend* backend;            // every kernel runs through it
  Parallel parallel{};         // t, c > 1 only in shape-only traces: Note [Per-GPU shapes]
};

// Fills every field of s but x (read), and writes the layer output y = h + act down_proj. y: [T, C]
void layer_forward(Tensor y, const SavedActs& s, const LayerWeights& w, const LayerContext& ctx);

// Rebuilds token rows [row_begin, row_end) of every per-token field of s (SavedField::per_token)
// from s.x and s.attn, without attention: xn1, inv_rms1 = rmsnorm(x); q, k, v = xn1 W^T, RoPE on
// q and k; h = x + attn Wo^T; xn2, inv_rms2 = rmsnorm(h); gate, up = xn2 W^T; act = silu(gate) up.
// The rows come out bit for bit as layer_forward wrote them: the same kernels, and the products
// in the same row panels (see Note [Reproducible rows] in backend/backend.h), so row_begin must be
// a multiple of the backend's reproducible_rows() (or row_begin == row_end). Needs no transients.
void layer_recompute_tokens(const SavedActs& s, int64_t row_begin, int64_t row_end,
                            const LayerWeights& w, const LayerContext& ctx);

// On entry dres = dL/dy, on exit dres = dL/dx (updated in place: the residual stream's gradient
// passes through unchanged plus the branches). Weight gradients accumulate into dw.
// Throws unless [r0, r1) is a row range of T tokens that fn can rebuild exactly: r0 a multiple of
// ctx.backend->reproducible_rows() (any r0 when the backend promises none), or empty.
void check_recompute_rows(const char* fn, int64_t r0, int64_t r1, int64_t T,
                          const LayerContext& ctx);

void layer_backward(Tensor dres, const LayerWeights& dw, const SavedActs& s, const LayerWeights& w,
                    const LayerContext& ctx);

}  // namespace memo
