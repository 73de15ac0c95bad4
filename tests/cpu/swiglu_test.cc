// SwiGLU: fp32 kernel vs the float64 reference (including large |g|, where exp over- or
// underflows), the reference backward vs finite differences, and thread-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

// Floor of the error scale, so values below it are compared absolutely: where exp_f32 flushes
// e^g < 1.8e-38 to 0 (g < -86.9), silu(g) = g e^g, |silu(g)| < 2e-36, comes out as -0. The
// tolerances (>= 8u) times this floor (>= 5e-35) cover that absolute error.
constexpr double kSwigluTinyAbs = 1e-27;

TEST(SwigluForward, matches_float64_reference_including_saturated_gates) {
  for (float spread : {4.0f, 120.0f}) {  // 120: e^-g overflows and underflows
    for (auto [T, F] : test::awkward_shapes()) {
      const std::vector<float> g = test::random_floats(T * F, 30, -spread, spread),
                               u = test::random_floats(T * F, 31);
      std::vector<float> a(T * F);
      swiglu_forward(Tensor(a.data(), {T, F}), ConstTensor(g.data(), {T, F}),
                     ConstTensor(u.data(), {T, F}));
      const std::vector<double> gd = test::to_double(g), ud = test::to_double(u);
      std::vector<double> ad(T * F), scale(T * F);
      swiglu_forward_ref(TensorF64(ad.data(), {T, F}), ConstTensorF64(gd.data(), {T, F}),
                         ConstTensorF64(ud.data(), {T, F}));
      for (size_t i = 0; i < ad.size(); ++i) scale[i] = std::abs(ad[i]) + kSwigluTinyAbs;
      // exp_f32 (<= 3 ulp, damped by e/(1+e) <= 1), then 1 + e, the division and the product:
      // <= 6u relative; 8u for margin on the exp bound.
      EXPECT_LE(test::max_scaled_err(a, ad, scale), 8.0 * kFloatU) << T << "x" << F;
    }
  }
}

TEST(SwigluBackward, matches_float64_reference_including_saturated_gates) {
  for (float spread : {4.0f, 120.0f}) {
    for (auto [T, F] : test::awkward_shapes()) {
      const std::vector<float> g = test::random_floats(T * F, 32, -spread, spread),
                               u = test::random_floats(T * F, 33),
                               da = test::random_floats(T * F, 34);
      std::vector<float> dg(T * F), du(T * F);
      swiglu_backward(Tensor(dg.data(), {T, F}), Tensor(du.data(), {T, F}),
                      ConstTensor(da.data(), {T, F}), ConstTensor(g.data(), {T, F}),
                      ConstTensor(u.data(), {T, F}));
      const std::vector<double> gd = test::to_double(g), ud = test::to_double(u),
                                dad = test::to_double(da);
      std::vector<double> dgd(T * F), dud(T * F), dg_scale(T * F), du_scale(T * F);
      swiglu_backward_ref(TensorF64(dgd.data(), {T, F}), TensorF64(dud.data(), {T, F}),
                          ConstTensorF64(dad.data(), {T, F}), ConstTensorF64(gd.data(), {T, F}),
                          ConstTensorF64(ud.data(), {T, F}));
      for (size_t i = 0; i < gd.size(); ++i) {
        const double s = 1.0 / (1.0 + std::exp(-gd[i]));
        // dg = da u s (1 + g (1 - s)) cancels near g = -1.28: scale by the terms' magnitudes.
        dg_scale[i] =
            std::abs(dad[i] * ud[i] * s) * (1.0 + std::abs(gd[i] * (1.0 - s))) + kSwigluTinyAbs;
        du_scale[i] = std::abs(dud[i]) + kSwigluTinyAbs;
      }
      // s: exp (<= 3 ulp), 1 + e and the division, <= 5u; then 3 to 4 more roundings.
      EXPECT_LE(test::max_scaled_err(du, dud, du_scale), 8.0 * kFloatU) << T << "x" << F;
      EXPECT_LE(test::max_scaled_err(dg, dgd, dg_scale), 12.0 * kFloatU) << T << "x" << F;
    }
  }
}

TEST(SwigluBackward, reference_gradients_match_finite_differences) {
  const int64_t T = 3, F = 11;
  const std::vector<double> g0 = test::to_double(test::random_floats(T * F, 35, -4.f, 4.f)),
                            u0 = test::to_double(test::random_floats(T * F, 36)),
                            probe = test::to_double(test::random_floats(T * F, 37));
  auto loss = [&](const std::vector<double>& g, const std::vector<double>& u) {
    std::vector<double> a(T * F);
    swiglu_forward_ref(TensorF64(a.data(), {T, F}), ConstTensorF64(g.data(), {T, F}),
                       ConstTensorF64(u.data(), {T, F}));
    return test::dot(a, probe);
  };
  std::vector<double> dg(T * F), du(T * F);
  swiglu_backward_ref(TensorF64(dg.data(), {T, F}), TensorF64(du.data(), {T, F}),
                      ConstTensorF64(probe.data(), {T, F}), ConstTensorF64(g0.data(), {T, F}),
                      ConstTensorF64(u0.data(), {T, F}));
  // Finite differences are good to ~1e-9 here (see finite_diff_grad); 1e-7 fails any wrong term.
  EXPECT_LE(test::max_grad_err(
                dg, test::finite_diff_grad(g0, [&](const auto& g) { return loss(g, u0); })),
            1e-7);
  EXPECT_LE(test::max_grad_err(
                du, test::finite_diff_grad(u0, [&](const auto& u) { return loss(g0, u); })),
            1e-7);
}

TEST(Swiglu, gives_the_same_bits_on_one_and_two_threads_and_propagates_nan) {
  const int64_t T = 67, F = 257;
  std::vector<float> g = test::random_floats(T * F, 38, -8.f, 8.f),
                     u = test::random_floats(T * F, 39);
  g[5] = NAN;
  auto run = [&](int threads) {
    std::vector<float> out(3 * T * F);
    test::with_threads(threads, [&] {
      swiglu_forward(Tensor(out.data(), {T, F}), ConstTensor(g.data(), {T, F}),
                     ConstTensor(u.data(), {T, F}));
      swiglu_backward(Tensor(out.data() + T * F, {T, F}), Tensor(out.data() + 2 * T * F, {T, F}),
                      ConstTensor(u.data(), {T, F}), ConstTensor(g.data(), {T, F}),
                      ConstTensor(u.data(), {T, F}));
    });
    return out;
  };
  const std::vector<float> one = run(1), two = run(2);
  EXPECT_TRUE(std::isnan(one[5]) && std::isnan(one[T * F + 5]));
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));  // NaN != NaN
}

TEST(Swiglu, rejects_mismatched_shapes) {
  std::vector<float> buf(64);
  Tensor a(buf.data(), {4, 8}), b(buf.data(), {8, 4});
  EXPECT_THROW(swiglu_forward(a, a, b), Error);
  EXPECT_THROW(swiglu_backward(a, a, a, b, a), Error);
}

}  // namespace
}  // namespace memo::cpu
