// The entry checks of every kernel, shared by all backends: Backend's entry points run check_<op>
// with the call's arguments before the implementation touches data (Note [Checked entry points]
// in backend.h), and the meta backend (meta/) runs nothing else. So a shape error is caught the
// same way whether a step computes or is only traced. Each throws memo::Error naming the op and the
// shapes; token and target ids (host memory) are checked against the vocabulary here too (DataError
// naming the position).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

#include "memo/backend/attn_mask.h"
#include "memo/core/targets.h"
#include "memo/core/tensor.h"

namespace memo {

void check_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps);
void check_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                            ConstTensor inv_rms);
void check_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                             ConstTensor b, float eps);
void check_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                              ConstTensor w, ConstTensor mean, ConstTensor rstd);
void check_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                      double attention_factor, int64_t first_position);
void check_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                        int64_t first_row);
void check_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                         int64_t first_row);
void check_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u);
void check_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u);
void check_gelu_forward(Tensor y, ConstTensor x);
void check_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x);
void check_bias_backward(Tensor db, ConstTensor dy);
void check_bias_add(Tensor y, ConstTensor b);
// Token and target ids are checked against the vocabulary where the host can read them
// (ids_on_host); a backend whose ids are in device memory passes false, and the model checks them
// before it copies them there (check_token_ids).
void check_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte,
                             bool ids_on_host = true);
void check_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens,
                              bool ids_on_host = true);
void check_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                         View<const int32_t> targets, float grad_scale, bool ids_on_host = true);
// DataError "<op>: <what> id <id> at position <t> is outside the vocabulary [0, V)" for the
// first id outside [0, V).
void check_token_ids(const char* op, const char* what, View<const int32_t> ids, int64_t V);
// Under tensor parallelism a rank holds rows [v0, v0 + V/t) of the embedding and the head
// (Note [Tensor-parallel parameters]); the model hands its kernels ids relative to v0, and
// kOtherShard for a token whose row another rank holds: the embedding gives it a zero row (and no
// gradient), vocab_parallel_ce_stats a target logit of 0. The kernels accept kOtherShard; the
// model checks every id against the whole vocabulary before it maps them (Model::run).
inline constexpr int32_t kOtherShard = -1;
// kIgnoredTarget (core/targets.h): a target the loss does not count.
// DataError as check_token_ids, for targets: kIgnoredTarget is allowed too.
void check_target_ids(const char* op, View<const int32_t> targets, int64_t V);
// Vocabulary-parallel cross-entropy (Backend::vocab_parallel_ce_stats and vocab_parallel_ce).
void check_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                   View<const int32_t> targets, bool ids_on_host = true);
void check_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                             View<const int32_t> targets, ConstTensor stats,
                             ConstTensor target_logit, bool ids_on_host = true);
void check_matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
                  float beta);
void check_copy(Tensor dst, ConstTensor src);
void check_convert(Tensor dst, ConstTensor src);
void check_fill(Tensor dst, float value);
void check_scale(Tensor x, float factor);
void check_add_into(Tensor dst, ConstTensor src);
void check_sum(ConstTensor x);
void check_sum_squares(ConstTensor x);

// Causal GQA attention (cpu/kernels.h): q [B*S, H*D], k and v [B*S, Hkv*D], o like q,
// lse [B, H, S], every matrix with unit column stride. Returns the dimensions it checked.
struct AttnDims {
  int64_t B, S, H, Hkv, G, D;  // G = H / Hkv query heads per kv head
};
AttnDims check_attention_forward(ConstTensor o, ConstTensor lse, ConstTensor q, ConstTensor k,
                                 ConstTensor v, int64_t batch, int64_t n_heads, int64_t n_kv_heads);
// The dimensions of an attention call whose shapes check_attention_forward (or _backward)
// accepted, without checking them again (a backend's implementation, after the entry checks).
AttnDims attention_dims(ConstTensor q, int64_t batch, int64_t n_heads, int64_t n_kv_heads);
// Also dq, dout like q and dk, dv like k, all with unit column stride.
AttnDims check_attention_backward(ConstTensor dq, ConstTensor dk, ConstTensor dv, ConstTensor dout,
                                  ConstTensor q, ConstTensor k, ConstTensor v, ConstTensor o,
                                  ConstTensor lse, int64_t batch, int64_t n_heads,
                                  int64_t n_kv_heads);
// A mask's key_start (backend/attn_mask.h): empty, or a contiguous vector of B*S; when on_host
// (always, from Backend's entry points), non-decreasing along each sequence and, causal, at most
// each row's index.
void check_attention_mask(const char* op, const AttnMask& mask, const AttnDims& d, bool on_host);
// o, o_part: [B*S, H*D] alike; lse, lse_part: [B, H, S] alike; all contiguous.
void check_attention_merge(ConstTensor o, ConstTensor lse, ConstTensor o_part,
                           ConstTensor lse_part);
// An optimiser update of one tensor: p and g contiguous of one length, each state tensor empty
// (switched off) or contiguous of that length.
void check_optimizer_update(const char* op, ConstTensor p, ConstTensor g,
                            std::initializer_list<ConstTensor> state);

// Attention of n new rows over a cache: q, o [n, H*D]; k, v [first + n, Hkv*D]; unit column
// strides; H a multiple of Hkv.
void check_attention_decode(ConstTensor o, ConstTensor q, ConstTensor k, ConstTensor v,
                            int64_t first, int64_t n_heads, int64_t n_kv_heads);

// A scratch view of at least `needed` floats, contiguous (needed is the backend's own figure).
void check_scratch(const char* op, ConstTensor scratch, int64_t needed);

}  // namespace memo
