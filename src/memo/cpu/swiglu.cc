// SwiGLU, elementwise fp32: a = silu(g) * u. Vectorised with exp_f32 (vec_math.h), parallel over
// rows; results do not depend on the thread count.
#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/vec_math.h"

namespace memo::cpu {

void swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  check_swiglu_forward(a, g, u);
  const int64_t T = g.rows(), F = g.cols();
#pragma omp parallel for schedule(static) if (T * F >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const float* gr = g.data() + t * g.ld();
    const float* ur = u.data() + t * u.ld();
    float* ar = a.data() + t * a.ld();
    // g / (1 + e^-g): for g -> -inf, e^-g = inf and the quotient is -0 (the limit), never NaN.
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) ar[f] = gr[f] / (1.0f + exp_f32(-gr[f])) * ur[f];
  }
}

// From a = silu(g) u with silu(g) = g s, s = sigmoid(g), s' = s (1 - s):
//   du = da silu(g) = da g s
//   dg = da u silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
void swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u) {
  check_swiglu_backward(dg, du, da, g, u);
  const int64_t T = g.rows(), F = g.cols();
#pragma omp parallel for schedule(static) if (T * F >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const float* gr = g.data() + t * g.ld();
    const float* ur = u.data() + t * u.ld();
    const float* dar = da.data() + t * da.ld();
    float* dgr = dg.data() + t * dg.ld();
    float* dur = du.data() + t * du.ld();
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const float x = gr[f];
      const float e = exp_f32(-x);
      const float s = 1.0f / (1.0f + e);
      // 1 - s = e s: for x >= 0, 1 - s would cancel (s near 1) and x (1 - s) lose |x| ulps; for
      // x < 0 (s < 1/2) 1 - s is exact enough, and e s would be inf * 0 once e overflows.
      const float one_minus_s = x >= 0.0f ? e * s : 1.0f - s;
      const float d = dar[f];  // read before writing: dg or du may alias da
      dur[f] = d * x * s;
      dgr[f] = d * ur[f] * s * (1.0f + x * one_minus_s);
    }
  }
}

}  // namespace memo::cpu
