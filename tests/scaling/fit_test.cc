#include "memo/scaling/fit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "memo/core/error.h"
#include "memo/core/random.h"
#include "memo/scaling/sweep_analysis.h"

namespace memo::scaling {
namespace {

std::vector<OptimalLr> points_from(Law law, const std::vector<double>& params,
                                   const std::vector<double>& batches, double noise,
                                   uint64_t seed) {
  std::vector<OptimalLr> out;
  NormalStream z(seed, 0);
  for (double b : batches) out.push_back({b, law_lr(law, params, b) * std::exp(noise * z.next())});
  return out;
}

const std::vector<double> kBatches = {2e3, 4e3, 8e3, 16e3, 32e3, 64e3, 128e3, 256e3, 512e3};

TEST(Fit, exact_surge_data_gives_its_parameters_back) {
  const LawComparison c = fit_laws(points_from(Law::kSurge, {3e-4, 4e4}, kBatches, 0.0, 1));
  EXPECT_NEAR(c.fits[0].params[0] / 3e-4, 1.0, 1e-6);
  EXPECT_NEAR(c.fits[0].params[1] / 4e4, 1.0, 1e-6);
  EXPECT_LT(c.fits[0].rss, 1e-12);
  EXPECT_EQ(c.best_by_aicc, Law::kSurge);
}

// With as few batch sizes as the power law has parameters every AICc is undefined (inf): the
// summary names no law best by it.
TEST(Fit, no_law_is_best_by_an_undefined_aicc) {
  const LawComparison c = fit_laws(points_from(Law::kSurge, {3e-4, 4e4}, {1e3, 1e4, 1e5}, 0.0, 1));
  for (const LawFit& f : c.fits) EXPECT_FALSE(std::isfinite(f.aicc));
  EXPECT_EQ(c.summary().find("best AICc"), std::string::npos) << c.summary();
  EXPECT_NE(
      fit_laws(points_from(Law::kSurge, {3e-4, 4e4}, kBatches, 0.0, 1)).summary().find("best AICc"),
      std::string::npos);
}

TEST(Fit, exact_power_data_gives_its_parameters_back) {
  const LawFit f =
      fit_law(Law::kPower, points_from(Law::kPower, {1e-3, 3e4, 0.7}, kBatches, 0.0, 1));
  EXPECT_NEAR(f.params[0] / 1e-3, 1.0, 1e-5);
  EXPECT_NEAR(f.params[1] / 3e4, 1.0, 1e-5);
  EXPECT_NEAR(f.params[2], 0.7, 1e-5);
}

// With 5% log-normal noise the 95% intervals should cover the truth; residuals are reported in
// the points' order and sum to the RSS.
TEST(Fit, noisy_sgd_data_intervals_cover_the_truth) {
  const std::vector<OptimalLr> pts = points_from(Law::kSgd, {2e-2, 1e4}, kBatches, 0.05, 7);
  const LawComparison c = fit_laws(pts);
  const LawFit& f = c.fits[1];
  EXPECT_LT(f.ci_low[0], 2e-2);
  EXPECT_GT(f.ci_high[0], 2e-2);
  EXPECT_LT(f.ci_low[1], 1e4);
  EXPECT_GT(f.ci_high[1], 1e4);
  double rss = 0.0;
  for (double r : f.residuals) rss += r * r;
  EXPECT_NEAR(rss, f.rss, 1e-12);
  EXPECT_EQ(f.dof, int(kBatches.size()) - 2);
  EXPECT_EQ(c.best_by_aicc, Law::kSgd);
  EXPECT_LT(c.fits[1].rss, c.fits[0].rss);
}

TEST(Fit, fewer_points_than_parameters_is_rejected) {
  const std::vector<OptimalLr> two = {{1e3, 1e-3}, {2e3, 2e-3}};
  try {
    fit_law(Law::kPower, two);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "the power law has 3 parameters but only 2 batch sizes were given; "
                 "sweep at least 3 batch sizes");
  }
  EXPECT_THROW(fit_law(Law::kSurge, {{1e3, 1e-3}}), ConfigError);
  const LawFit exact = fit_law(Law::kSgd, two);  // n = p: fits, but no interval
  EXPECT_TRUE(std::isnan(exact.ci_low[0]));
  EXPECT_EQ(fit_laws(two).fits.size(), 2u);  // no power-law fit with 2 points
}

// Parabola in log lr: losses that are exactly quadratic in log lr give the vertex back.
TEST(Fit, optimal_lr_interpolates_in_log_lr_and_flags_edges) {
  std::vector<SweepRun> runs;
  const double best_log_lr = std::log(3e-3);
  for (double lr : {1e-3, 2e-3, 4e-3, 8e-3}) {
    const double d = std::log(lr) - best_log_lr;
    runs.push_back({1024, lr, 2.0 + d * d});
    runs.push_back({1024, lr, 2.0 + d * d + 0.5});  // a second seed: averaged
    runs.push_back({4096, lr, -std::log(lr)});      // best at the largest lr: an edge
  }
  runs.push_back({512, 1e-3, NAN});  // diverged everywhere but one lr
  runs.push_back({512, 2e-3, 3.0});
  runs.push_back({512, 4e-3, INFINITY});
  const std::vector<OptimalLr> o = optimal_lrs(runs);
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].batch, 512);
  EXPECT_DOUBLE_EQ(o[0].lr, 2e-3);
  EXPECT_TRUE(o[0].at_grid_edge);
  EXPECT_NEAR(o[1].lr / 3e-3, 1.0, 1e-9);
  EXPECT_FALSE(o[1].at_grid_edge);
  EXPECT_EQ(o[1].lrs_tried, 4);
  EXPECT_DOUBLE_EQ(o[2].lr, 8e-3);
  EXPECT_TRUE(o[2].at_grid_edge);
}

// (S/S_min - 1)(E/E_min - 1) = 1 (Eq. 20) with S = S_min (1 + B_n/B), E = E_min (1 + B/B_n).
TEST(Fit, steps_to_target_line_recovers_b_noise_and_minima) {
  const double b_noise = 5e4, s_min = 2000;
  std::vector<StepsToTarget> pairs;
  for (double b : kBatches) {
    const double s = s_min * (1.0 + b_noise / b);
    pairs.push_back({s, s * b});
  }
  const TargetLossFit f = fit_steps_to_target(pairs);
  EXPECT_NEAR(f.b_noise / b_noise, 1.0, 1e-9);
  EXPECT_NEAR(f.s_min / s_min, 1.0, 1e-9);
  EXPECT_NEAR(f.e_min / (b_noise * s_min), 1.0, 1e-9);
  EXPECT_THROW(fit_steps_to_target({{100, 1e5}}), ConfigError);
  // More steps at larger E: slope > 0, no trade-off.
  EXPECT_THROW(fit_steps_to_target({{100, 1e5}, {200, 4e5}, {50, 2.5e4}}), ConfigError);
}

// Scattered (S, E) pairs: the slope's interval reaches past 0, which the text says in words
// rather than as a negative noise scale; tight ones print both bounds.
TEST(Fit, a_target_interval_reaching_zero_is_printed_as_unbounded_below) {
  SweepAnalysis a;
  a.metric = "loss_reduction";
  a.eps_max_surge = a.eps_max_sgd = 1e-3;
  a.target = fit_steps_to_target({{1000, 1e5}, {300, 4e5}, {400, 1.6e6}});
  ASSERT_LT(a.target->b_noise_ci_low, 0.0);
  std::string text = to_text(a);
  EXPECT_NE(text.find("[<= 0, "), std::string::npos) << text;
  EXPECT_NE(text.find("(not bounded from below: more batch sizes or seeds)"), std::string::npos);
  a.target = fit_steps_to_target({{1000, 1e5}, {500, 4e5}, {400, 1.6e6}, {380, 6.4e6}});
  ASSERT_GT(a.target->b_noise_ci_low, 0.0);
  text = to_text(a);
  EXPECT_EQ(text.find("<= 0"), std::string::npos) << text;
  EXPECT_EQ(text.find("not bounded"), std::string::npos) << text;
}

TEST(Fit, eps_max_from_eq23_and_eq24_inverts_the_laws) {
  const std::vector<OptimalLr> surge = points_from(Law::kSurge, {3e-4, 4e4}, kBatches, 0.0, 1);
  EXPECT_NEAR(eps_max_surge(surge, 4e4) / 3e-4, 1.0, 1e-12);
  const std::vector<OptimalLr> power = points_from(Law::kPower, {1e-3, 3e4, 0.5}, kBatches, 0.0, 1);
  EXPECT_NEAR(eps_max_power(power, 3e4, 0.5) / 1e-3, 1.0, 1e-12);
}

TEST(Fit, student_t_quantiles_match_tables) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.7062, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.975, 5), 2.5706, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0423, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.95, 10), 1.8125, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.025, 5), -2.5706, 1e-3);
}

}  // namespace
}  // namespace memo::scaling
