// GELU, tanh approximation (GPT-2), elementwise fp32. Vectorised with exp_f32 (vec_math.h) through
// the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^(-2u)): no tanh call (which would not
// vectorise), and no cancellation in 1 + tanh(u) for u << 0. Parallel over rows; results do not
// depend on the thread count.
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/vec_math.h"

namespace memo::cpu {
namespace {
// z = 2u = x (kGeluA + kGeluB x^2), with u = sqrt(2/pi) (x + 0.044715 x^3). Both terms have the
// sign of x, so z never cancels. Each constant is rounded once from its double value.
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;
constexpr float kGeluA = float(2.0 * kSqrt2OverPi);
constexpr float kGeluB = float(2.0 * kSqrt2OverPi * kGeluCubic);
constexpr float kGeluB3 = float(3.0 * 2.0 * kSqrt2OverPi * kGeluCubic);  // dz/dx = A + 3 B x^2
// x^2 is capped here in dz/dx so that it stays finite (x^2 overflows from |x| = 1.8e19): s is
// saturated to exactly 0 or 1 long before (from |x| near 10), so the cap changes no result.
constexpr float kGeluMaxSq = 1e30f;
}  // namespace

// y = x s, s = sigmoid(z). For large finite x (z = inf once x^3 overflows) e^-z = 0 and y = x;
// for large negative x e^-z = inf and y = -0, the limit; NaN flows through. (x = -inf gives NaN.)
template <class A>
void gelu_forward(View<A> y, View<const A> x) {
  const int64_t T = x.rows(), C = x.cols();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const A* xr = x.data() + t * x.ld();
    A* yr = y.data() + t * y.ld();
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float v = wide(xr[c]);
      const float z = v * (kGeluA + kGeluB * (v * v));
      put(yr[c], v / (1.0f + exp_f32(-z)));
    }
  }
}

void gelu_forward(Tensor y, ConstTensor x) {
  check_gelu_forward(y, x);
  gelu_forward<float>(y, x);
}

// From y = x s(z), s' = s (1 - s):  dy/dx = s + x s (1 - s) dz/dx,  dz/dx = A + 3 B x^2.
template <class A>
void gelu_backward(View<A> dx, View<const A> dy, View<const A> x) {
  const int64_t T = x.rows(), C = x.cols();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const A* xr = x.data() + t * x.ld();
    const A* dyr = dy.data() + t * dy.ld();
    A* dxr = dx.data() + t * dx.ld();
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float v = wide(xr[c]);
      const float v2 = v * v;
      const float z = v * (kGeluA + kGeluB * v2);
      const float e = exp_f32(-z);
      const float s = 1.0f / (1.0f + e);
      // 1 - s = e s for z >= 0 (1 - s would cancel with s near 1); for z < 0 (s < 1/2) 1 - s is
      // exact enough, and e s would be inf * 0 once e overflows.
      const float one_minus_s = v >= 0.0f ? e * s : 1.0f - s;
      // Multiplied left to right so that a zero factor (s or 1 - s saturated) comes before
      // dz/dx, which is large (1e35 at |x| = 1e18): 0 * large stays 0.
      const float d = wide(dyr[c]);  // read before writing: dx may alias dy
      const float v2c = v2 < kGeluMaxSq ? v2 : kGeluMaxSq;
      put(dxr[c], d * (s + ((v * s) * one_minus_s) * (kGeluA + kGeluB3 * v2c)));
    }
  }
}

void gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  check_gelu_backward(dx, dy, x);
  gelu_backward<float>(dx, dy, x);
}

template void gelu_forward<bf16>(View<bf16>, View<const bf16>);
template void gelu_backward<bf16>(View<bf16>, View<const bf16>, View<const bf16>);

}  // namespace memo::cpu
