// Small elementwise and reduction helpers the model and optimisers use around the main kernels.
// Parallel with static partitions; reductions sum in double in a fixed order (deterministic).
#pragma once

#include "memo/core/tensor.h"

namespace memo::cpu {

void copy(Tensor dst, ConstTensor src);      // dst = src (any 1-D/2-D views of equal shape)
void fill(Tensor dst, float value);          // dst = value
void scale(Tensor x, float factor);          // x *= factor
double sum_squares(ConstTensor x);           // sum x^2, in double
void add_into(Tensor dst, ConstTensor src);  // dst += src

}  // namespace memo::cpu
