#include "memo/scaling/laws.h"

#include <gtest/gtest.h>

#include <cmath>

#include "memo/core/error.h"
#include "scaling/scaling_test_util.h"

namespace memo::scaling {
namespace {

// The laws in normalised form, x = B / B_noise (surge paper Eq. 13 and the SGD law), at a few x.
TEST(Laws, normalised_shapes_match_the_table) {
  const double xs[] = {1.0 / 64, 1.0 / 4, 1.0, 4.0, 64.0};
  const double surge[] = {0.246, 0.80, 1.0, 0.80, 0.246};
  const double sgd[] = {0.015, 0.20, 0.5, 0.80, 0.985};
  for (int k = 0; k < 5; ++k) {
    EXPECT_NEAR(lr_surge(xs[k] * 100, 1.0, 100), surge[k], 5e-4) << xs[k];
    EXPECT_NEAR(lr_sgd(xs[k] * 100, 1.0, 100), sgd[k], 5e-4) << xs[k];
  }
  EXPECT_DOUBLE_EQ(lr_power(50, 2.0, 50, 1.0), lr_sgd(50, 2.0, 50));
  EXPECT_DOUBLE_EQ(law_lr(Law::kSurge, {3.0, 10.0}, 10.0), 3.0);
  EXPECT_EQ(law_peak_batch(Law::kSurge, {3.0, 10.0}), 10.0);
  EXPECT_FALSE(law_peak_batch(Law::kSgd, {3.0, 10.0}).has_value());
  EXPECT_FALSE(law_peak_batch(Law::kPower, {3.0, 10.0, 0.5}).has_value());
  EXPECT_THROW(law_lr(Law::kPower, {1.0, 2.0}, 1.0), ConfigError);
}

// The SGD optimum of the Gaussian model is exactly the SGD law with McCandlish's parameters.
TEST(Laws, exact_sgd_optimum_is_the_sgd_law) {
  const QuadraticProblem p = test::surge_problem();
  const GaussianModel m = gaussian_model_at(p, p.theta0);
  const LawParams sgd = sgd_params(m);
  for (double b : {1.0, 7.0, 100.0, 5000.0})
    EXPECT_NEAR(lr_sgd_exact(m, b) / lr_sgd(b, sgd.eps_max, sgd.b_noise), 1.0, 1e-12) << b;
}

// The surge paper (arXiv 2405.14578): Eq. 13 tracks Eq. 9 at small B, Eq. 9 tends to the Eq. 17
// plateau at large B, and its peak is near Eq. 14's B_noise with a height near Eq. 16's eps_max.
TEST(Laws, exact_sign_optimum_follows_theorems_3_and_4) {
  const QuadraticProblem p = test::surge_problem();
  const GaussianModel m = gaussian_model_at(p, p.theta0);
  const LawParams surge = surge_params(m);
  for (double x : {1.0 / 64, 1.0 / 16, 1.0 / 4}) {
    const double b = x * surge.b_noise;
    EXPECT_NEAR(lr_sign_exact(m, b) / lr_surge(b, surge.eps_max, surge.b_noise), 1.0, 0.03) << b;
  }
  EXPECT_NEAR(lr_sign_exact(m, 1e9 * surge.b_noise) / lr_sign_large_batch(m), 1.0, 1e-3);
  const double peak = sign_peak_batch_exact(m, surge.b_noise / 100, surge.b_noise * 100);
  EXPECT_NEAR(peak / surge.b_noise, 1.0, 0.1);  // 1.05 here: Eq. 14 is the small-batch limit
  EXPECT_NEAR(lr_sign_exact(m, peak) / surge.eps_max, 1.0, 0.01);
  EXPECT_LT(lr_sign_exact(m, peak * 4), lr_sign_exact(m, peak));  // it falls after the peak
}

TEST(Laws, bad_model_is_rejected_with_the_field) {
  GaussianModel m{{1.0, 2.0}, {1.0, 0.0}, {1, 0, 0, 1}};
  try {
    check_model(m);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "Gaussian model sigma[1] = 0 must be > 0");
  }
  EXPECT_THROW(lr_surge(0.0, 1.0, 1.0), ConfigError);
}

}  // namespace
}  // namespace memo::scaling
