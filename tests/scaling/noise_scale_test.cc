#include "memo/scaling/noise_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "memo/core/error.h"
#include "memo/core/random.h"

namespace memo::scaling {
namespace {

// Synthetic gradients with known mean G and per-example covariance diag(sigma^2): a micro-batch
// of b examples has gradient G + sigma / sqrt(b) z exactly, so the norms are those a trainer
// would pass. Returns |G|^2 and tr(Sigma).
struct Synthetic {
  std::vector<double> mu, sigma;
  double g2 = 0.0, trace = 0.0;
};

Synthetic synthetic(int64_t n) {
  Synthetic s;
  for (int64_t i = 0; i < n; ++i) {
    s.mu.push_back(0.1 * std::cos(double(i)));
    s.sigma.push_back(0.5 + 0.5 * unit_open(mix(9, uint64_t(i))));
    s.g2 += s.mu.back() * s.mu.back();
    s.trace += s.sigma.back() * s.sigma.back();
  }
  return s;
}

// One step: k micro-batch squared norms and the squared norm of their mean.
void step_norms(const Synthetic& s, int k, double b, uint64_t step, std::vector<double>& small,
                double& big) {
  const size_t n = s.mu.size();
  std::vector<double> mean(n, 0.0);
  small.assign(size_t(k), 0.0);
  for (int j = 0; j < k; ++j) {
    NormalStream z(step, uint64_t(j));
    for (size_t i = 0; i < n; ++i) {
      const double g = s.mu[i] + s.sigma[i] / std::sqrt(b) * z.next();
      small[size_t(j)] += g * g;
      mean[i] += g / k;
    }
  }
  big = 0.0;
  for (double m : mean) big += m * m;
}

// B_simple = tr(Sigma)/|G|^2 = 119 here (n = 256), measured with b = 16, k = 8 (B_big = 128):
// after 4000 steps with decay 0.999 the EMAs average about 1000 independent estimates each.
TEST(NoiseScale, converges_to_the_true_b_simple) {
  const Synthetic s = synthetic(256);
  const double truth = s.trace / s.g2;
  NoiseScaleEstimator est({.decay = 0.999});
  std::vector<double> small;
  double big = 0.0;
  for (uint64_t t = 0; t < 4000; ++t) {
    step_norms(s, 8, 16.0, t, small, big);
    ASSERT_TRUE(est.update(small, big, 16.0));
  }
  std::cout << "B_simple " << *est.b_simple() << " (truth " << truth << "), |G|^2 " << *est.g2()
            << " (" << s.g2 << "), tr(Sigma) " << *est.trace() << " (" << s.trace << ")\n";
  EXPECT_NEAR(*est.b_simple() / truth, 1.0, 0.05);
  EXPECT_NEAR(*est.g2() / s.g2, 1.0, 0.05);
  EXPECT_NEAR(*est.trace() / s.trace, 1.0, 0.05);
}

TEST(NoiseScale, one_step_estimates_are_exact_on_expected_norms) {
  // E|g_b|^2 = |G|^2 + tr/b: feeding expectations must return |G|^2 and tr exactly.
  const double g2 = 2.0, tr = 300.0, b = 4, B = 32;
  const NoiseEstimate e = estimate_noise(g2 + tr / b, g2 + tr / B, b, B);
  EXPECT_NEAR(e.g2, g2, 1e-12);
  EXPECT_NEAR(e.trace, tr, 1e-9);
}

TEST(NoiseScale, restored_state_continues_identically) {
  const Synthetic s = synthetic(32);
  NoiseScaleEstimator a({.decay = 0.9}), b({.decay = 0.9});
  std::vector<double> small;
  double big = 0.0;
  for (uint64_t t = 0; t < 10; ++t) {
    step_norms(s, 4, 2.0, t, small, big);
    a.update(small, big, 2.0);
  }
  const nlohmann::json saved = a.state();
  b.restore(saved.get<NoiseScaleState>());
  for (uint64_t t = 10; t < 20; ++t) {
    step_norms(s, 4, 2.0, t, small, big);
    a.update(small, big, 2.0);
    b.update(small, big, 2.0);
  }
  EXPECT_EQ(*a.b_simple(), *b.b_simple());
  EXPECT_EQ(a.state().updates, 20);
}

TEST(NoiseScale, non_finite_norms_are_skipped_and_bad_input_rejected) {
  NoiseScaleEstimator est;
  EXPECT_FALSE(est.b_simple().has_value());
  EXPECT_FALSE(est.update({1.0, NAN}, 1.0, 4.0));
  EXPECT_EQ(est.state().skipped, 1);
  EXPECT_FALSE(est.g2().has_value());
  EXPECT_THROW(est.update({1.0}, 1.0, 4.0), ConfigError);  // one micro-batch: no estimate
  EXPECT_THROW(NoiseScaleEstimator({.decay = 1.0}), ConfigError);
}

TEST(NoiseScale, a_non_finite_step_norm_is_skipped_too) {
  NoiseScaleEstimator est;
  EXPECT_FALSE(est.update({1.0, 2.0}, INFINITY, 4.0));
  EXPECT_FALSE(est.update({1.0, 2.0}, NAN, 4.0));
  EXPECT_EQ(est.state().skipped, 2);
  EXPECT_EQ(est.state().updates, 0);
}

// One update of expected norms: both debiased EMAs are the one-step estimates.
TEST(NoiseScale, g2_and_trace_are_debiased_from_the_first_update) {
  NoiseScaleEstimator est({.decay = 0.99});
  const double g2 = 2.0, tr = 300.0, b = 4, B = 32;
  ASSERT_TRUE(est.update({g2 + tr / b, g2 + tr / b}, g2 + tr / B, b, B));
  EXPECT_NEAR(*est.g2(), g2, 1e-9);
  EXPECT_NEAR(*est.trace(), tr, 1e-9 * tr);
}

}  // namespace
}  // namespace memo::scaling
