// Small elementwise and reduction helpers the model and optimisers use around the main kernels.
// Parallel with static partitions; reductions sum in double in a fixed order (deterministic).
#pragma once

#include "memo/backend/backend.h"
#include "memo/core/tensor.h"
#include "memo/cpu/views.h"

namespace memo::cpu {

void copy(Tensor dst, ConstTensor src);  // dst = src (any 1-D/2-D views of equal shape)
void fill(Tensor dst, float value);      // dst = value
// dst = src rounded to bf16 (nearest even), and back (exact); contiguous views of one length.
void convert(View<bf16> dst, View<const float> src);
void convert(View<float> dst, View<const bf16> src);
void scale(Tensor x, float factor);          // x *= factor
double sum(ConstTensor x);                   // sum x, in double, in index order (one thread)
double sum_squares(ConstTensor x);           // sum x^2, in double
void add_into(Tensor dst, ConstTensor src);  // dst += src
// The same over bf16 (Note [bf16 elementwise on the CPU]), unchecked: Backend checked the shapes.
// add_into is instantiated for every pair of f32 and bf16 but (f32, f32), the function above.
template <class D, class S>
void add_into(View<D> dst, View<const S> src);
void copy(View<bf16> dst, View<const bf16> src);
void fill(View<bf16> dst, float value);
void scale(View<bf16> x, float factor);
// The noise-scale probe's fused pass (Backend::noise_probe_pass): sum g^2 over fixed chunks of
// kNoiseProbeChunk with 8 double lanes each, chunk sums added in order; noise_probe_chunks(n)
// partial sums.
int64_t noise_probe_chunks(int64_t n);
double noise_probe_pass(Tensor g, Tensor sum, NoiseProbePass pass, View<double> partial);

}  // namespace memo::cpu
