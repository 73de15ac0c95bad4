// The optimisers' per-tensor updates on the CPU, fp32 (the scalars come from optim/, see
// backend/optim_steps.h). Elementwise loops parallel with static partitions; Adafactor's sums
// are fixed chunks added in order (Note [Deterministic reductions] in optim_kernels.cc), so every
// result is independent of the thread count. p, the state tensors and g are contiguous and of
// one length; a state tensor that the options switch off is empty.
#pragma once

#include "memo/backend/optim_steps.h"
#include "memo/core/tensor.h"
#include "memo/cpu/views.h"

namespace memo::cpu {

// d = g + wd p;  momentum: b = first ? d : mu b + (1 - damp) d, p -= lr (nesterov ? d + mu b : b);
// else p -= lr d.
void sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s);
// momentum: m = beta m + (1 - beta) g, p = keep p - lr sign(m); else p = keep p - lr sign(g).
void signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s);
// d = g + wd p; m = b1 m + (1 - b1) d; v = b2 v + (1 - b2) d^2;
// p -= step_size m / (sqrt(v) / bias2_sqrt + eps).
void adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s);
// p *= keep; then Adam's moments and step on g.
void adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s);
// d = g + wd p; sum += d^2; p -= lr d / (sqrt(sum) + eps).
void adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s);
// d = g + wd p; v = a v + (1 - a) d^2; centered: ga = a ga + (1 - a) d, var = v - ga^2, else v;
// den = sqrt(var) + eps; momentum: b = mu b + d / den, p -= lr b; else p -= lr d / den.
void rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                    const RmspropStep& s);
// c = b1 m + (1 - b1) g; p = keep p - lr sign(c); m = b2 m + (1 - b2) g.
void lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s);
// Chunks of Adafactor's ordered sums over n elements: the scratch `partial` needs
// max(rows, adafactor_chunks(numel)) doubles for every tensor it updates.
int64_t adafactor_chunks(int64_t numel);
// RMS of x (Adafactor's RMS(p)), summed in double over fixed chunks.
double adafactor_rms(ConstTensor x, View<double> partial);
// An [R, C] matrix p, g: row and column means of g^2 + eps1 into row [R] and col [C] (EMAs),
// u = g / sqrt(row / mean(row) * col), clipped by RMS(u) / clip_threshold, times alpha; with a
// first moment m = b1 m + (1 - b1) u; p = keep p - (m or u). row_inv [R], col_inv [C]: scratch.
void adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col, ConstTensor g,
                             Tensor row_inv, Tensor col_inv, View<double> partial,
                             const AdafactorStep& s);
// A vector (unfactored): v = beta2t v + (1 - beta2t) (g^2 + eps1); u = g / sqrt(v), clipped and
// scaled as above; p = keep p - (m or u).
void adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g, View<double> partial,
                             const AdafactorStep& s);

}  // namespace memo::cpu
