// RMSNorm forward and backward, fp32, vectorised over columns and parallel over rows (dw: over
// column blocks). Row sums (sum of squares, sum of w dy x) and the dw sum over tokens accumulate in
// double: exact enough that the only errors are the final float roundings, for any C or T, and
// immune to overflow of x^2 for |x| up to 1e150. Every result is independent of the thread count.
#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {

// Columns of dw one thread sums over all tokens at a time: a double accumulator on the stack.
inline constexpr int64_t kDwBlock = 128;

template <class X, class W>
void rmsnorm_forward(View<X> y, Tensor inv_rms, View<const X> x, View<const W> w, float eps) {
  const int64_t T = x.rows(), C = x.cols();
  const W* wp = w.data();
  float* rp = inv_rms.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const X* xr = x.data() + t * x.ld();
    X* yr = y.data() + t * y.ld();
    double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t c = 0; c < C; ++c) sum_sq += double(wide(xr[c])) * double(wide(xr[c]));
    const float r = float(1.0 / std::sqrt(sum_sq / double(C) + double(eps)));
    rp[t] = r;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) put(yr[c], wide(xr[c]) * r * wide(wp[c]));
  }
}

void rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w, float eps) {
  check_rmsnorm_forward(y, inv_rms, x, w, eps);
  rmsnorm_forward<float, float>(y, inv_rms, x, w, eps);
}

// From y_c = x_c r w_c with r = (mean_j x_j^2 + eps)^(-1/2), so dr/dx_c = -r^3 x_c / C:
//   dx_c = dy_c w_c r + sum_j dy_j w_j x_j dr/dx_c = r w_c dy_c - x_c r^3 mean_j(w_j dy_j x_j)
//   dw_c = sum_t dy[t,c] x[t,c] r[t]
template <class X, class W>
void rmsnorm_backward(View<X> dx, Tensor dw, View<const X> dy, View<const X> x, View<const W> w,
                      ConstTensor inv_rms) {
  const int64_t T = x.rows(), C = x.cols();
  const W* wp = w.data();
  const float* rp = inv_rms.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const X* xr = x.data() + t * x.ld();
    const X* dyr = dy.data() + t * dy.ld();
    X* dxr = dx.data() + t * dx.ld();
    double dot = 0.0;  // sum_c w dy x
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c)
      dot += double(wide(wp[c])) * double(wide(dyr[c])) * double(wide(xr[c]));
    const double r = rp[t];
    const float coef = float(r * r * r * dot / double(C));
    const float rf = rp[t];
#pragma omp simd
    for (int64_t c = 0; c < C; ++c)
      put(dxr[c], wide(dxr[c]) + (rf * wide(wp[c]) * wide(dyr[c]) - wide(xr[c]) * coef));
  }
  // dw: each thread owns whole column blocks and sums their tokens in order 0..T-1, so the sum is
  // the same for any thread count, with no races and no scratch from the caller.
  const int64_t n_blocks = (C + kDwBlock - 1) / kDwBlock;
  float* dwp = dw.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    const int64_t c0 = blk * kDwBlock;
    const int64_t n = std::min(kDwBlock, C - c0);
    double acc[kDwBlock] = {};
    for (int64_t t = 0; t < T; ++t) {
      const X* xr = x.data() + t * x.ld() + c0;
      const X* dyr = dy.data() + t * dy.ld() + c0;
      const double r = rp[t];
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) acc[c] += double(wide(dyr[c])) * double(wide(xr[c])) * r;
    }
    for (int64_t c = 0; c < n; ++c) dwp[c0 + c] = float(double(dwp[c0 + c]) + acc[c]);
  }
}

void rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x, ConstTensor w,
                      ConstTensor inv_rms) {
  check_rmsnorm_backward(dx, dw, dy, x, w, inv_rms);
  rmsnorm_backward<float, float>(dx, dw, dy, x, w, inv_rms);
}

template void rmsnorm_forward<bf16, bf16>(View<bf16>, Tensor, View<const bf16>, View<const bf16>,
                                          float);
template void rmsnorm_forward<bf16, float>(View<bf16>, Tensor, View<const bf16>, View<const float>,
                                           float);
template void rmsnorm_backward<bf16, bf16>(View<bf16>, Tensor, View<const bf16>, View<const bf16>,
                                           View<const bf16>, ConstTensor);
template void rmsnorm_backward<bf16, float>(View<bf16>, Tensor, View<const bf16>, View<const bf16>,
                                            View<const float>, ConstTensor);

template void rmsnorm_forward<float, bf16>(View<float>, Tensor, View<const float>, View<const bf16>,
                                           float);
template void rmsnorm_backward<float, bf16>(View<float>, Tensor, View<const float>,
                                            View<const float>, View<const bf16>, ConstTensor);

template void rmsnorm_forward<float, float>(View<float>, Tensor, View<const float>,
                                            View<const float>, float);
template void rmsnorm_backward<float, float>(View<float>, Tensor, View<const float>,
                                             View<const float>, View<const float>, ConstTensor);
}  // namespace memo::cpu
