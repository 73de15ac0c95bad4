// exp_f32 against exp in double over its whole range, at its edges, and for inf and NaN.
#include "memo/cpu/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/kernel_test_util.h"

namespace memo::cpu {
namespace {

TEST(ExpF32, is_within_three_ulp_of_exp_over_the_normal_range) {
  double worst = 0.0;
  for (float x = -86.8f; x < 88.7f; x += 0.00731f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(double(exp_f32(x)) - want) / want);
  }
  // Taylor truncation < 5e-9, reduction error ~ |n| 2^-34, and ~7 roundings in Horner's rule,
  // each damped by |r| <= 0.35: measured ~1.2 ulp; 3 ulp (3u) is the documented bound.
  EXPECT_LE(worst, 3.0 * test::kFloatU);
}

TEST(ExpF32, saturates_to_infinity_and_zero_and_propagates_nan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(89.0f), inf);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(-87.0f), 0.0f);  // below kMinArg: flushed (true value 1.6e-38)
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  // Just below overflow the result is finite and accurate.
  const float near_max = 88.72f;
  EXPECT_TRUE(std::isfinite(exp_f32(near_max)));
  EXPECT_NEAR(exp_f32(near_max) / std::exp(double(near_max)), 1.0, 3.0 * test::kFloatU);
}

}  // namespace
}  // namespace memo::cpu
