// Float64 references for the fp32 CPU kernels in kernels.h (all but attention): the oracles the
// tests compare against. Written straight from the math, one plain loop per formula, no threads,
// no vector code, no cleverness beyond subtracting the row max in logsumexp. Same argument order
// and accumulation conventions as the kernels (rmsnorm_backward and layernorm_backward add
// into dx; dw, db, dwte add).
#pragma once

#include <cstdint>

#include "memo/core/tensor.h"

namespace memo::cpu {

using TensorF64 = View<double>;
using ConstTensorF64 = View<const double>;

// c = alpha * op(a) @ op(b) + beta * c
void matmul_ref(TensorF64 c, ConstTensorF64 a, ConstTensorF64 b, bool trans_a, bool trans_b,
                double alpha = 1.0, double beta = 0.0);

void rmsnorm_forward_ref(TensorF64 y, TensorF64 inv_rms, ConstTensorF64 x, ConstTensorF64 w,
                         double eps);
void rmsnorm_backward_ref(TensorF64 dx, TensorF64 dw, ConstTensorF64 dy, ConstTensorF64 x,
                          ConstTensorF64 w, ConstTensorF64 inv_rms);

// layernorm_backward_ref adds into dx; dw, db add.
void layernorm_forward_ref(TensorF64 y, TensorF64 mean, TensorF64 rstd, ConstTensorF64 x,
                           ConstTensorF64 w, ConstTensorF64 b, double eps);
void layernorm_backward_ref(TensorF64 dx, TensorF64 dw, TensorF64 db, ConstTensorF64 dy,
                            ConstTensorF64 x, ConstTensorF64 w, ConstTensorF64 mean,
                            ConstTensorF64 rstd);

void rope_table_ref(TensorF64 cos, TensorF64 sin, int64_t head_dim, double theta);
void rope_forward_ref(TensorF64 x, ConstTensorF64 cos, ConstTensorF64 sin, int64_t head_dim);
void rope_backward_ref(TensorF64 dx, ConstTensorF64 cos, ConstTensorF64 sin, int64_t head_dim);

void swiglu_forward_ref(TensorF64 a, ConstTensorF64 g, ConstTensorF64 u);
void swiglu_backward_ref(TensorF64 dg, TensorF64 du, ConstTensorF64 da, ConstTensorF64 g,
                         ConstTensorF64 u);

void gelu_forward_ref(TensorF64 y, ConstTensorF64 x);
void gelu_backward_ref(TensorF64 dx, ConstTensorF64 dy, ConstTensorF64 x);

// db += sum_t dy[t,:]
void bias_backward_ref(TensorF64 db, ConstTensorF64 dy);

void embedding_forward_ref(TensorF64 x, View<const int32_t> tokens, ConstTensorF64 wte);
void embedding_backward_ref(TensorF64 dwte, ConstTensorF64 dx, View<const int32_t> tokens);

// dlogits may be empty (loss only).
void cross_entropy_ref(TensorF64 losses, TensorF64 dlogits, ConstTensorF64 logits,
                       View<const int32_t> targets, double grad_scale);

}  // namespace memo::cpu
