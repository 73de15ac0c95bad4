// RMSNorm: fp32 kernel vs the float64 reference, the reference backward vs finite differences,
// thread-count independence and shape checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

constexpr float kRmsEps = 1e-5f;

TEST(RmsnormForward, matches_float64_reference_on_awkward_shapes_and_magnitudes) {
  // Magnitudes from 1e-18 (eps dominates) to 1e18 (x^2 = 1e36 would overflow a float sum).
  for (float magnitude : {1.0f, 1e-18f, 1e18f}) {
    for (auto [T, C] : test::awkward_shapes()) {
      std::vector<float> x = test::random_floats(T * C, 1),
                         w = test::random_floats(C, 2, 0.5f, 2.f);
      for (float& v : x) v *= magnitude;
      std::vector<float> y(T * C), r(T);
      rmsnorm_forward(Tensor(y.data(), {T, C}), Tensor(r.data(), {T}),
                      ConstTensor(x.data(), {T, C}), ConstTensor(w.data(), {C}), kRmsEps);
      std::vector<double> xd = test::to_double(x), wd = test::to_double(w), yd(T * C), rd(T);
      rmsnorm_forward_ref(TensorF64(yd.data(), {T, C}), TensorF64(rd.data(), {T}),
                          ConstTensorF64(xd.data(), {T, C}), ConstTensorF64(wd.data(), {C}),
                          double(kRmsEps));
      // inv_rms: a double computation rounded once to float (<= u). y = (x r) w: r's rounding plus
      // two float products, <= 3u; 4u leaves room for the double sum's ~C * 1e-16.
      EXPECT_LE(test::max_rel_err(r, rd), 1.0 * kFloatU) << T << "x" << C << " mag " << magnitude;
      EXPECT_LE(test::max_rel_err(y, yd), 4.0 * kFloatU) << T << "x" << C << " mag " << magnitude;
    }
  }
}

TEST(RmsnormBackward, matches_float64_reference_and_accumulates_into_dx_and_dw) {
  for (auto [T, C] : test::awkward_shapes()) {
    std::vector<float> x = test::random_floats(T * C, 3), w = test::random_floats(C, 4),
                       dy = test::random_floats(T * C, 5), dx = test::random_floats(T * C, 6),
                       dw = test::random_floats(C, 7), r(T), y(T * C);
    rmsnorm_forward(Tensor(y.data(), {T, C}), Tensor(r.data(), {T}), ConstTensor(x.data(), {T, C}),
                    ConstTensor(w.data(), {C}), kRmsEps);
    // The reference starts from the same dx, dw and takes the same fp32 inv_rms, so only the
    // backward's arithmetic is compared.
    std::vector<double> xd = test::to_double(x), wd = test::to_double(w), dyd = test::to_double(dy),
                        dxd = test::to_double(dx), dwd = test::to_double(dw),
                        rd = test::to_double(r);
    // Per-element magnitudes: the sum of the absolute values of the terms each result adds.
    std::vector<double> dx_scale(T * C), dw_scale(C);
    for (int64_t c = 0; c < C; ++c) dw_scale[c] = std::abs(dwd[c]);
    for (int64_t t = 0; t < T; ++t) {
      double dot = 0.0;
      for (int64_t c = 0; c < C; ++c) dot += wd[c] * dyd[t * C + c] * xd[t * C + c];
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = t * C + c;
        dx_scale[i] = std::abs(dxd[i]) + std::abs(rd[t] * wd[c] * dyd[i]) +
                      std::abs(xd[i] * rd[t] * rd[t] * rd[t] * dot / C);
        dw_scale[c] += std::abs(dyd[i] * xd[i] * rd[t]);
      }
    }
    rmsnorm_backward(Tensor(dx.data(), {T, C}), Tensor(dw.data(), {C}),
                     ConstTensor(dy.data(), {T, C}), ConstTensor(x.data(), {T, C}),
                     ConstTensor(w.data(), {C}), ConstTensor(r.data(), {T}));
    rmsnorm_backward_ref(TensorF64(dxd.data(), {T, C}), TensorF64(dwd.data(), {C}),
                         ConstTensorF64(dyd.data(), {T, C}), ConstTensorF64(xd.data(), {T, C}),
                         ConstTensorF64(wd.data(), {C}), ConstTensorF64(rd.data(), {T}));
    // dx: r w dy (2 products), x coef (coef rounded once, 1 product), a subtraction and the += :
    // at most ~6 roundings, each <= u of a term bounded by the scale.
    EXPECT_LE(test::max_scaled_err(dx, dxd, dx_scale), 6.0 * kFloatU) << T << "x" << C;
    // dw: sums in double, one final rounding of dw + sum (<= u of the result).
    EXPECT_LE(test::max_scaled_err(dw, dwd, dw_scale), 2.0 * kFloatU) << T << "x" << C;
  }
}

TEST(RmsnormBackward, reference_gradients_match_finite_differences) {
  const int64_t T = 3, C = 7;
  const double eps = 1e-5;
  const std::vector<double> x0 = test::to_double(test::random_floats(T * C, 8)),
                            w0 = test::to_double(test::random_floats(C, 9)),
                            probe = test::to_double(test::random_floats(T * C, 10));
  // L(x, w) = sum y * probe, so dL/dy = probe.
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w) {
    std::vector<double> y(T * C), r(T);
    rmsnorm_forward_ref(TensorF64(y.data(), {T, C}), TensorF64(r.data(), {T}),
                        ConstTensorF64(x.data(), {T, C}), ConstTensorF64(w.data(), {C}), eps);
    return test::dot(y, probe);
  };
  std::vector<double> y(T * C), r(T), dx(T * C), dw(C);
  rmsnorm_forward_ref(TensorF64(y.data(), {T, C}), TensorF64(r.data(), {T}),
                      ConstTensorF64(x0.data(), {T, C}), ConstTensorF64(w0.data(), {C}), eps);
  rmsnorm_backward_ref(TensorF64(dx.data(), {T, C}), TensorF64(dw.data(), {C}),
                       ConstTensorF64(probe.data(), {T, C}), ConstTensorF64(x0.data(), {T, C}),
                       ConstTensorF64(w0.data(), {C}), ConstTensorF64(r.data(), {T}));
  const auto fd_x = test::finite_diff_grad(x0, [&](const auto& x) { return loss(x, w0); });
  const auto fd_w = test::finite_diff_grad(w0, [&](const auto& w) { return loss(x0, w); });
  // Finite differences are good to ~1e-9 here (see finite_diff_grad); 1e-7 fails any wrong term.
  EXPECT_LE(test::max_grad_err(dx, fd_x), 1e-7);
  EXPECT_LE(test::max_grad_err(dw, fd_w), 1e-7);
}

TEST(Rmsnorm, gives_the_same_bits_on_one_and_two_threads) {
  const int64_t T = 67, C = 257;  // above the parallel threshold
  const std::vector<float> x = test::random_floats(T * C, 11), w = test::random_floats(C, 12),
                           dy = test::random_floats(T * C, 13);
  auto run = [&](int threads) {
    std::vector<float> out(T * C + T + T * C + C, 0.0f);
    Tensor y(out.data(), {T, C}), r(out.data() + T * C, {T}), dx(out.data() + T * C + T, {T, C}),
        dw(out.data() + 2 * T * C + T, {C});
    test::with_threads(threads, [&] {
      rmsnorm_forward(y, r, ConstTensor(x.data(), {T, C}), ConstTensor(w.data(), {C}), kRmsEps);
      rmsnorm_backward(dx, dw, ConstTensor(dy.data(), {T, C}), ConstTensor(x.data(), {T, C}),
                       ConstTensor(w.data(), {C}), r);
    });
    return out;
  };
  EXPECT_EQ(run(1), run(2));
  EXPECT_EQ(run(2), run(2));
}

TEST(Rmsnorm, rejects_mismatched_shapes) {
  std::vector<float> buf(64);
  Tensor x(buf.data(), {4, 8}), y(buf.data(), {4, 7}), r(buf.data(), {4}), w(buf.data(), {8});
  EXPECT_THROW(rmsnorm_forward(y, r, x, w, kRmsEps), Error);
  EXPECT_THROW(rmsnorm_forward(x, r, x, Tensor(buf.data(), {7}), kRmsEps), Error);
  EXPECT_THROW(rmsnorm_backward(x, w, x, x, w, Tensor(buf.data(), {3})), Error);
}

}  // namespace
}  // namespace memo::cpu
