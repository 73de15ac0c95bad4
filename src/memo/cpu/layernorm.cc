// LayerNorm forward and backward, fp32 in and out, parallel over rows (dw, db: over column
// blocks). Mean, variance (two passes), the row sums of the backward and the dw, db sums over
// tokens are in double, and so is each element's arithmetic before its one final rounding: x - mean
// cancels when |mean| >> std, and a float subtraction would lose the digits the output keeps.
// Every result is independent of the thread count.
#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/elem.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {
// Columns of dw and db one thread sums over all tokens at a time: double accumulators on the stack.
constexpr int64_t kLnColBlock = 128;
}  // namespace

template <class X, class W>
void layernorm_forward(View<X> y, Tensor mean, Tensor rstd, View<const X> x, View<const W> w,
                       View<const W> b, float eps) {
  const int64_t T = x.rows(), C = x.cols();
  const W* wp = w.data();
  const W* bp = b.data();
  float* mp = mean.data();
  float* rp = rstd.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const X* xr = x.data() + t * x.ld();
    X* yr = y.data() + t * y.ld();
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += double(wide(xr[c]));
    const double m = sum / double(C);
    double sum_sq = 0.0;  // second pass: sum (x - m)^2 has no cancellation, unlike E[x^2] - m^2
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t c = 0; c < C; ++c) sum_sq += (double(wide(xr[c])) - m) * (double(wide(xr[c])) - m);
    const double r = 1.0 / std::sqrt(sum_sq / double(C) + double(eps));
    mp[t] = float(m);
    rp[t] = float(r);
    // y from the double mean and rstd (the saved floats are rounded copies for the backward).
#pragma omp simd
    for (int64_t c = 0; c < C; ++c)
      put(yr[c], float((double(wide(xr[c])) - m) * r) * wide(wp[c]) + wide(bp[c]));
  }
}

void layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x, ConstTensor w,
                       ConstTensor b, float eps) {
  check_layernorm_forward(y, mean, rstd, x, w, b, eps);
  layernorm_forward<float, float>(y, mean, rstd, x, w, b, eps);
}

// From y_c = xhat_c w_c + b_c, xhat_c = (x_c - mean) r, g_c = w_c dy_c, and
//   d xhat_j / d x_c = r ([j == c] - 1/C - xhat_j xhat_c / C):
//   dx_c = sum_j g_j d xhat_j / d x_c = r (g_c - mean_j g_j - xhat_c mean_j(g_j xhat_j))
//   dw_c = sum_t dy[t,c] xhat[t,c],  db_c = sum_t dy[t,c]
// xhat is recomputed from the saved fp32 mean and rstd, in double (x - mean of two floats is
// exact).
template <class X, class W>
void layernorm_backward(View<X> dx, Tensor dw, Tensor db, View<const X> dy, View<const X> x,
                        View<const W> w, ConstTensor mean, ConstTensor rstd) {
  const int64_t T = x.rows(), C = x.cols();
  const W* wp = w.data();
  const float* mp = mean.data();
  const float* rp = rstd.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const X* xr = x.data() + t * x.ld();
    const X* dyr = dy.data() + t * dy.ld();
    X* dxr = dx.data() + t * dx.ld();
    const double m = mp[t], r = rp[t];
    double sum_g = 0.0, sum_gx = 0.0;  // sum_c g, sum_c g xhat
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < C; ++c) {
      const double g = double(wide(wp[c])) * double(wide(dyr[c]));
      sum_g += g;
      sum_gx += g * ((double(wide(xr[c])) - m) * r);
    }
    const double mean_g = sum_g / double(C), mean_gx = sum_gx / double(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (double(wide(xr[c])) - m) * r;
      const double g = double(wide(wp[c])) * double(wide(dyr[c]));
      put(dxr[c], float(double(wide(dxr[c])) + r * (g - mean_g - xhat * mean_gx)));
    }
  }
  // dw, db: each thread owns whole column blocks and sums their tokens in order 0..T-1, so the
  // sums are the same for any thread count, with no races and no scratch from the caller.
  const int64_t n_blocks = (C + kLnColBlock - 1) / kLnColBlock;
  float* dwp = dw.data();
  float* dbp = db.data();
#pragma omp parallel for schedule(static) if (T * C >= kParallelMinNumel)
  for (int64_t blk = 0; blk < n_blocks; ++blk) {
    const int64_t c0 = blk * kLnColBlock;
    const int64_t n = std::min(kLnColBlock, C - c0);
    double acc_w[kLnColBlock] = {}, acc_b[kLnColBlock] = {};
    for (int64_t t = 0; t < T; ++t) {
      const X* xr = x.data() + t * x.ld() + c0;
      const X* dyr = dy.data() + t * dy.ld() + c0;
      const double m = mp[t], r = rp[t];
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) {
        acc_w[c] += double(wide(dyr[c])) * ((double(wide(xr[c])) - m) * r);
        acc_b[c] += double(wide(dyr[c]));
      }
    }
    for (int64_t c = 0; c < n; ++c) {
      dwp[c0 + c] = float(double(dwp[c0 + c]) + acc_w[c]);
      dbp[c0 + c] = float(double(dbp[c0 + c]) + acc_b[c]);
    }
  }
}

void layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy, ConstTensor x,
                        ConstTensor w, ConstTensor mean, ConstTensor rstd) {
  check_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
  layernorm_backward<float, float>(dx, dw, db, dy, x, w, mean, rstd);
}

template void layernorm_forward<bf16, bf16>(View<bf16>, Tensor, Tensor, View<const bf16>,
                                            View<const bf16>, View<const bf16>, float);
template void layernorm_forward<bf16, float>(View<bf16>, Tensor, Tensor, View<const bf16>,
                                             View<const float>, View<const float>, float);
template void layernorm_backward<bf16, bf16>(View<bf16>, Tensor, Tensor, View<const bf16>,
                                             View<const bf16>, View<const bf16>, ConstTensor,
                                             ConstTensor);
template void layernorm_backward<bf16, float>(View<bf16>, Tensor, Tensor, View<const bf16>,
                                              View<const bf16>, View<const float>, ConstTensor,
                                              ConstTensor);

template void layernorm_forward<float, bf16>(View<float>, Tensor, Tensor, View<const float>,
                                             View<const bf16>, View<const bf16>, float);
template void layernorm_backward<float, bf16>(View<float>, Tensor, Tensor, View<const float>,
                                              View<const float>, View<const bf16>, ConstTensor,
                                              ConstTensor);

template void layernorm_forward<float, float>(View<float>, Tensor, Tensor, View<const float>,
                                              View<const float>, View<const float>, float);
template void layernorm_backward<float, float>(View<float>, Tensor, Tensor, View<const float>,
                                               View<const float>, View<const float>, ConstTensor,
                                               ConstTensor);
}  // namespace memo::cpu
