// GELU (tanh approximation): the float64 reference vs the tanh formula, the fp32 kernel vs the
// reference (including saturated tails and |x| up to 3e38), the reference backward vs finite
// differences, and thread-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

// Floor of the error scale, so values below it are compared absolutely: where e^-z overflows
// (x < -9.6) the kernel's y = x / (1 + e^-z) is -0 or a subnormal, the true |y| < 1e-37. The
// tolerances (>= 10u) times this floor (>= 6e-37) cover that absolute error.
constexpr double kGeluTinyAbs = 1e-30;

// z = 2 sqrt(2/pi) (x + 0.044715 x^3): the sigmoid's argument, in double.
double gelu_z(double x) {
  return 2.0 * std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
}

// Inputs: random in [-spread, spread), then the extremes and signed zeros in the first slots.
std::vector<float> gelu_inputs(int64_t n, uint64_t seed, float spread) {
  std::vector<float> x = test::random_floats(n, seed, -spread, spread);
  const float extremes[] = {3e38f, -3e38f, 1e18f, -1e18f, 0.0f, -0.0f, 10.0f, -10.0f};
  for (size_t i = 0; i < std::size(extremes) && i < x.size(); ++i) x[i] = extremes[i];
  return x;
}

TEST(GeluForward, reference_is_the_tanh_formula) {
  // 0.5 x (1 + tanh(u)) is accurate for u > -5 (no cancellation yet): the reference's sigmoid form
  // must agree to double rounding there. 0.8411919906 is PyTorch's gelu(1, approximate="tanh").
  std::vector<double> x;
  for (double v = -3.0; v <= 6.0; v += 0.125) x.push_back(v);
  const int64_t n = int64_t(x.size());
  std::vector<double> y(n);
  gelu_forward_ref(TensorF64(y.data(), {1, n}), ConstTensorF64(x.data(), {1, n}));
  for (int64_t i = 0; i < n; ++i) {
    const double u = std::sqrt(2.0 / std::numbers::pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    EXPECT_NEAR(y[i], 0.5 * x[i] * (1.0 + std::tanh(u)), 1e-14 * (1.0 + std::abs(x[i]))) << x[i];
  }
  const double one = 1.0;
  double y1 = 0.0;
  gelu_forward_ref(TensorF64(&y1, {1, 1}), ConstTensorF64(&one, {1, 1}));
  EXPECT_NEAR(y1, 0.8411919906, 1e-10);
}

TEST(GeluForward, matches_float64_reference_on_awkward_shapes_and_magnitudes) {
  // 4: the usual range; 12: e^-z over- and underflows; 1e-18 and 1e18: x^3 underflows / overflows.
  for (float spread : {4.0f, 12.0f, 1e-18f, 1e18f}) {
    for (auto [T, C] : test::awkward_shapes()) {
      const std::vector<float> x = gelu_inputs(T * C, 60, spread);
      std::vector<float> y(T * C);
      gelu_forward(Tensor(y.data(), {T, C}), ConstTensor(x.data(), {T, C}));
      const std::vector<double> xd = test::to_double(x);
      std::vector<double> yd(T * C), scale(T * C);
      gelu_forward_ref(TensorF64(yd.data(), {T, C}), ConstTensorF64(xd.data(), {T, C}));
      for (size_t i = 0; i < xd.size(); ++i) {
        const double z = gelu_z(xd[i]), s = 1.0 / (1.0 + std::exp(-z));
        // z carries ~6 roundings (constants, x^2, products, sum: no cancellation), an error of
        // 6u |z| in the exponent, which reaches s damped by 1 - s.
        scale[i] = std::abs(yd[i]) * (1.0 + std::abs(z) * (1.0 - s)) + kGeluTinyAbs;
      }
      // exp_f32 (<= 3 ulp = 6u), 1 + e and the division (2u), the product (u): 9u, plus 6u per
      // unit of |z| (1 - s), which the scale carries; 10u.
      EXPECT_LE(test::max_scaled_err(y, yd, scale), 10.0 * kFloatU)
          << T << "x" << C << " " << spread;
    }
  }
}

TEST(GeluBackward, matches_float64_reference_on_awkward_shapes_and_magnitudes) {
  for (float spread : {4.0f, 12.0f, 1e-18f, 1e18f}) {
    for (auto [T, C] : test::awkward_shapes()) {
      const std::vector<float> x = gelu_inputs(T * C, 61, spread),
                               dy = test::random_floats(T * C, 62);
      std::vector<float> dx(T * C);
      gelu_backward(Tensor(dx.data(), {T, C}), ConstTensor(dy.data(), {T, C}),
                    ConstTensor(x.data(), {T, C}));
      const std::vector<double> xd = test::to_double(x), dyd = test::to_double(dy);
      std::vector<double> dxd(T * C), scale(T * C);
      gelu_backward_ref(TensorF64(dxd.data(), {T, C}), ConstTensorF64(dyd.data(), {T, C}),
                        ConstTensorF64(xd.data(), {T, C}));
      for (size_t i = 0; i < xd.size(); ++i) {
        const double v = xd[i], z = gelu_z(v), s = 1.0 / (1.0 + std::exp(-z));
        const double dz = 2.0 * std::sqrt(2.0 / std::numbers::pi) * (1.0 + 3.0 * 0.044715 * v * v);
        // gelu' = s + x s (1 - s) dz/dx cancels near x = -0.75: scale by the terms' magnitudes,
        // each widened by the exponent's error as in the forward (the second term through 1 - s =
        // e s as well, undamped).
        const double t2 = std::abs(v * s * (1.0 - s) * dz);
        scale[i] = std::abs(dyd[i]) * (s * (1.0 + std::abs(z) * (1.0 - s)) +
                                       (t2 > 0.0 ? t2 * (1.0 + std::abs(z)) : 0.0)) +
                   kGeluTinyAbs;
      }
      // s as in the forward (<= 9u + 6u |z| (1 - s)); the second term: s twice, 1 - s (its error
      // or e's, 6u + 6u |z|), dz/dx (~5u) and 4 products; the sum and * dy: about 36u + 18u |z|
      // within the scale. 40u.
      EXPECT_LE(test::max_scaled_err(dx, dxd, scale), 40.0 * kFloatU)
          << T << "x" << C << " " << spread;
    }
  }
}

TEST(GeluBackward, reference_gradient_matches_finite_differences) {
  const int64_t T = 3, C = 11;
  const std::vector<double> x0 = test::to_double(test::random_floats(T * C, 63, -5.f, 5.f)),
                            probe = test::to_double(test::random_floats(T * C, 64));
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(T * C);
    gelu_forward_ref(TensorF64(y.data(), {T, C}), ConstTensorF64(x.data(), {T, C}));
    return test::dot(y, probe);
  };
  std::vector<double> dx(T * C);
  gelu_backward_ref(TensorF64(dx.data(), {T, C}), ConstTensorF64(probe.data(), {T, C}),
                    ConstTensorF64(x0.data(), {T, C}));
  // Finite differences are good to ~1e-9 here (see finite_diff_grad); 1e-7 fails any wrong term.
  EXPECT_LE(test::max_grad_err(dx, test::finite_diff_grad(x0, loss)), 1e-7);
}

TEST(Gelu, gives_the_same_bits_on_one_and_two_threads_and_propagates_nan) {
  const int64_t T = 67, C = 257;  // above the parallel threshold
  std::vector<float> x = gelu_inputs(T * C, 65, 12.f);
  const std::vector<float> dy = test::random_floats(T * C, 66);
  x[100] = NAN;
  auto run = [&](int threads) {
    std::vector<float> out(2 * T * C);
    test::with_threads(threads, [&] {
      gelu_forward(Tensor(out.data(), {T, C}), ConstTensor(x.data(), {T, C}));
      gelu_backward(Tensor(out.data() + T * C, {T, C}), ConstTensor(dy.data(), {T, C}),
                    ConstTensor(x.data(), {T, C}));
    });
    return out;
  };
  const std::vector<float> one = run(1), two = run(2);
  EXPECT_TRUE(std::isnan(one[100]) && std::isnan(one[T * C + 100]));
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));  // NaN != NaN
}

TEST(Gelu, backward_may_write_over_dy) {
  const int64_t T = 5, C = 13;
  const std::vector<float> x = gelu_inputs(T * C, 67, 4.f), dy = test::random_floats(T * C, 68);
  std::vector<float> apart(T * C), in_place = dy;
  gelu_backward(Tensor(apart.data(), {T, C}), ConstTensor(dy.data(), {T, C}),
                ConstTensor(x.data(), {T, C}));
  gelu_backward(Tensor(in_place.data(), {T, C}), ConstTensor(in_place.data(), {T, C}),
                ConstTensor(x.data(), {T, C}));
  EXPECT_EQ(apart, in_place);
}

TEST(Gelu, rejects_mismatched_shapes) {
  std::vector<float> buf(64);
  Tensor a(buf.data(), {4, 8}), b(buf.data(), {8, 4});
  EXPECT_THROW(gelu_forward(a, b), Error);
  EXPECT_THROW(gelu_backward(a, a, b), Error);
  EXPECT_THROW(gelu_backward(a, b, a), Error);
}

}  // namespace
}  // namespace memo::cpu
