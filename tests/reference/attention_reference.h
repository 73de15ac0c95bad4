// Plain float64 causal grouped-query attention: the oracle for attention.cc, used only by tests
// and benchmarks. Naive on purpose: builds the full S x S score matrix for each (batch, head), so
// its memory is O(S^2) and its time is far from the tiled kernel's. Same layouts as kernels.h:
// q, o: [B*S, H*D]; k, v: [B*S, Hkv*D]; lse: [B, H, S]; scale 1/sqrt(D); query head h reads kv head
// h / (H / Hkv).
#pragma once

#include <cstdint>

#include "memo/backend/attn_mask.h"
#include "memo/core/tensor.h"

namespace memo::cpu {

// o[b,i,h] = sum_{j<=i} p_ij v_j,  p_ij = exp(s_ij - lse_i),  s_ij = q_i.k_j / sqrt(D),
// lse_i = log sum_{j<=i} exp(s_ij). AttnMask::kFull: the sums run over every j < S; a mask's
// key_start drops the keys before it (a row with none left: o = 0, lse = -inf).
void attention_forward_ref(View<double> o, View<double> lse, View<const double> q,
                           View<const double> k, View<const double> v, int64_t batch,
                           int64_t n_heads, int64_t n_kv_heads, AttnMask mask = AttnMask::kCausal);
// dv_j = sum_i p_ij do_i;  dp_ij = do_i.v_j;  ds_ij = p_ij (dp_ij - sum_j' p_ij' dp_ij');
// dq_i = sum_j ds_ij k_j / sqrt(D);  dk_j = sum_i ds_ij q_i / sqrt(D). dk, dv of a kv head sum
// over its query heads. dq, dk, dv overwrite. Recomputes p itself (takes no o or lse).
void attention_backward_ref(View<double> dq, View<double> dk, View<double> dv,
                            View<const double> dout, View<const double> q, View<const double> k,
                            View<const double> v, int64_t batch, int64_t n_heads,
                            int64_t n_kv_heads, AttnMask mask = AttnMask::kCausal);

}  // namespace memo::cpu
