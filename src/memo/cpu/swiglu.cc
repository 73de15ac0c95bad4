// SwiGLU, elementwise fp32: a = silu(g) * u. Vectorised with exp_f32 (vec_math.h), parallel over
// rows; results do not depend on the thread count.
#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/vec_math.h"

namespace memo::cpu {

template <class A>
void swiglu_forward(View<A> a, View<const A> g, View<const A> u) {
  const int64_t T = g.rows(), F = g.cols();
#pragma omp parallel for schedule(static) if (T * F >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const A* gr = g.data() + t * g.ld();
    const A* ur = u.data() + t * u.ld();
    A* ar = a.data() + t * a.ld();
    // g / (1 + e^-g): for g -> -inf, e^-g = inf and the quotient is -0 (the limit), never NaN.
#pragma omp simd
    for (int64_t f = 0; f < F; ++f)
      put(ar[f], wide(gr[f]) / (1.0f + exp_f32(-wide(gr[f]))) * wide(ur[f]));
  }
}

void swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  check_swiglu_forward(a, g, u);
  swiglu_forward<float>(a, g, u);
}

// From a = silu(g) u with silu(g) = g s, s = sigmoid(g), s' = s (1 - s):
//   du = da silu(g) = da g s
//   dg = da u silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
template <class A>
void swiglu_backward(View<A> dg, View<A> du, View<const A> da, View<const A> g, View<const A> u) {
  const int64_t T = g.rows(), F = g.cols();
#pragma omp parallel for schedule(static) if (T * F >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const A* gr = g.data() + t * g.ld();
    const A* ur = u.data() + t * u.ld();
    const A* dar = da.data() + t * da.ld();
    A* dgr = dg.data() + t * dg.ld();
    A* dur = du.data() + t * du.ld();
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const float x = wide(gr[f]);
      const float e = exp_f32(-x);
      const float s = 1.0f / (1.0f + e);
      // 1 - s = e s: for x >= 0, 1 - s would cancel (s near 1) and x (1 - s) lose |x| ulps; for
      // x < 0 (s < 1/2) 1 - s is exact enough, and e s would be inf * 0 once e overflows.
      const float one_minus_s = x >= 0.0f ? e * s : 1.0f - s;
      const float d = wide(dar[f]);  // read before writing: dg or du may alias da
      const float uf = wide(ur[f]);  // and u
      put(dur[f], d * x * s);
      put(dgr[f], d * uf * s * (1.0f + x * one_minus_s));
    }
  }
}

void swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g, ConstTensor u) {
  check_swiglu_backward(dg, du, da, g, u);
  swiglu_backward<float>(dg, du, da, g, u);
}

template void swiglu_forward<bf16>(View<bf16>, View<const bf16>, View<const bf16>);
template void swiglu_backward<bf16>(View<bf16>, View<bf16>, View<const bf16>, View<const bf16>,
                                    View<const bf16>);

}  // namespace memo::cpu
