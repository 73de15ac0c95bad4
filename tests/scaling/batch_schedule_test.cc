// The noise-driven batch schedule (scaling/batch_schedule.h): on the quadratic simulator's
// Gaussian gradient model, where B_simple, the critical batch, the surge peak and the optimal lrs
// are known in closed form, the controller's batch and lr track them within a derived tolerance;
// the batch is monotone and capped; the state round-trips bit for bit; bad options name the flag.
#include "memo/scaling/batch_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <tuple>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/random.h"
#include "memo/scaling/noise_scale.h"
#include "memo/scaling/sweep_analysis.h"
#include "memo/train/schedule.h"
#include "scaling/scaling_test_util.h"
#include "test_util.h"

namespace memo::scaling {
namespace {

// Note [Tolerance of the tracked batch]
// The controller sees the estimator's B_hat = EMA(T_s) / EMA(G_s) (noise_scale.h), where step s
// with k_s micro-batches of b tokens (B_s = k_s b) gives, for independent Gaussian coordinates
// g_ij = mu_i + sigma_i / sqrt(b) z (sigma_i^2 per token), writing S = sum_j |g_j - g_bar|^2:
//   T_s = S b / (k_s - 1) = sum_i sigma_i^2 chi^2_{k-1,i} / (k_s - 1),  E T_s = tr(Sigma),
//         Var T_s = 2 sum sigma^4 / (k_s - 1);
//   G_s = |g_bar|^2 - T_s / B_s,  E G_s = |G|^2,
//         Var G_s = sum (2 sigma^4 / B_s^2 + 4 mu^2 sigma^2 / B_s) + Var T_s / B_s^2;
//   Cov(T_s, G_s) = -Var T_s / B_s  (g_bar and S are independent for Gaussian samples).
// To first order (delta method), with EMA weights w_s = beta^(t - s) (the debiasing cancels),
//   delta_t^2 = Var(B_hat) / B_ref^2
//             = sum_s w_s^2 [Var T_s / A^2 + Var G_s / C^2 - 2 Cov_s / (A C)],
//   A = sum_s w_s tr(Sigma), C = sum_s w_s |G_s|^2 (true values), B_ref = A / C.
// Checked once by Monte Carlo (300 seeds of 300 steps, beta 0.99, the 1024-coordinate isotropic
// problem below at B_simple = 4096 tokens, b = 128): delta predicted 0.084, 0.036, 0.0059 and
// measured 0.083, 0.035, 0.0056 at k = 2, 4, 32; the mean of B_hat / B_simple was 0.994-1.001.
// The batch is sized by K min(B_hat over the patience streak) and rounded down to micro-batches,
// so at every step  batch_tokens <= K max_s B_ref(s) (1 + z delta_s)  (s >= min_observations),
// and once settled, B_hat above the band for `patience` steps would have grown it, so
//   batch_tokens >= min(K B_ref (1 - z delta) / (1 + h),  K B_ref (1 - z delta) - micro_tokens,
//                       max_batch tokens).
// z = 4 standard deviations: the EMA remembers ~(1 + beta) / (1 - beta) steps (199 at beta =
// 0.99, 399 at 0.995), so a run of 1500-2500 steps holds fewer than 10 independent stretches and
// a one-sided 4-sigma excursion in any of them has a chance below 1e-3 (and the runs are
// deterministic: it either passes or not, for good). The first-order expansion needs delta << 1;
// each test asserts delta <= 0.15, where the neglected second-order terms (relative size delta^2
// <= 0.023) are small against z delta.
struct Truth {          // the Gaussian model at one point, per token
  double trace = 0.0;   // tr(Sigma)
  double g2 = 0.0;      // |G|^2
  double sigma4 = 0.0;  // sum sigma^4
  double mu2_sigma2 = 0.0;
  double b_simple() const { return trace / g2; }
};

Truth truth_of(const std::vector<double>& mu, const std::vector<double>& sigma) {
  Truth t;
  for (size_t i = 0; i < mu.size(); ++i) {
    const double s2 = sigma[i] * sigma[i];
    t.trace += s2;
    t.g2 += mu[i] * mu[i];
    t.sigma4 += s2 * s2;
    t.mu2_sigma2 += mu[i] * mu[i] * s2;
  }
  return t;
}

// Tracks B_ref and delta_t of Note [Tolerance of the tracked batch] step by step.
class RefEstimate {
 public:
  explicit RefEstimate(double beta) : beta_(beta) {}
  void add(const Truth& t, double micro_tokens, int64_t k) {
    const double big = micro_tokens * double(k);
    const double var_t = 2.0 * t.sigma4 / double(k - 1);
    const double var_g =
        2.0 * t.sigma4 / (big * big) + 4.0 * t.mu2_sigma2 / big + var_t / (big * big);
    const double cov = -var_t / big;
    // scale old sums by beta (weights w_s = beta^(t - s)), add the new step with weight 1
    a_ = beta_ * a_ + t.trace;
    c_ = beta_ * c_ + t.g2;
    vt_ = beta_ * beta_ * vt_ + var_t;
    vg_ = beta_ * beta_ * vg_ + var_g;
    cv_ = beta_ * beta_ * cv_ + cov;
  }
  double b_ref() const { return a_ / c_; }
  double delta() const {
    return std::sqrt(vt_ / (a_ * a_) + vg_ / (c_ * c_) - 2.0 * cv_ / (a_ * c_));
  }

 private:
  double beta_;
  double a_ = 0.0, c_ = 0.0, vt_ = 0.0, vg_ = 0.0, cv_ = 0.0;
};

// One step's micro-batch gradients at the true gradient mu: the estimator's update. Returns the
// step's gradient, the mean of the micro-batch gradients.
std::vector<double> feed(NoiseScaleEstimator& est, const std::vector<double>& mu,
                         const std::vector<double>& sigma, double micro_tokens, int64_t k,
                         uint64_t seed, int64_t step) {
  const size_t n = mu.size();
  std::vector<double> small(static_cast<size_t>(k)), sum(n, 0.0);
  NormalStream z(seed, uint64_t(step));
  const double scale = 1.0 / std::sqrt(micro_tokens);
  for (int64_t j = 0; j < k; ++j) {
    double sq = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double g = mu[i] + sigma[i] * scale * z.next();
      sq += g * g;
      sum[i] += g;
    }
    small[size_t(j)] = sq;
  }
  double big = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum[i] /= double(k);
    big += sum[i] * sum[i];
  }
  est.update(small, big, micro_tokens);
  return sum;
}

constexpr double kZ = 4.0;

struct Tracked {
  std::vector<int64_t> batches;     // per step, sequences
  double delta_max = 0.0;           // the largest delta_t once changes are allowed
  double upper_tokens = 0.0;        // max over those steps of K B_ref (1 + z delta)
  double b_ref = 0.0, delta = 0.0;  // at the end
  StepPlan last;
};

// Runs `steps` steps at a fixed point (mu, sigma): the estimator (decay beta) feeds the schedule.
Tracked run_fixed_point(BatchSchedule& s, const std::vector<double>& mu,
                        const std::vector<double>& sigma, double beta, int64_t steps,
                        uint64_t seed) {
  NoiseScaleEstimator est(NoiseScaleOptions{beta});
  RefEstimate ref(beta);
  const Truth t = truth_of(mu, sigma);
  const double micro_tokens = double(s.options().micro_batch * s.options().seq);
  Tracked r;
  for (int64_t step = 1; step <= steps; ++step) {
    const StepPlan p = s.next();
    EXPECT_EQ(p.step, step);
    feed(est, mu, sigma, micro_tokens, p.micro_batches, seed, step);
    ref.add(t, micro_tokens, p.micro_batches);
    if (step >= s.options().min_observations) {
      r.delta_max = std::max(r.delta_max, ref.delta());
      r.upper_tokens = std::max(
          r.upper_tokens, s.options().noise_multiple * ref.b_ref() * (1.0 + kZ * ref.delta()));
    }
    s.observe(est.b_simple());
    r.batches.push_back(s.state().batch);
    r.last = p;
  }
  r.b_ref = ref.b_ref();
  r.delta = ref.delta();
  return r;
}

double lower_tokens(const BatchScheduleOptions& o, double b_ref, double delta) {
  const double target = o.noise_multiple * b_ref * (1.0 - kZ * delta);
  return std::min({target / (1.0 + o.hysteresis), target - double(o.micro_batch * o.seq),
                   double(o.max_batch * o.seq)});
}

// An isotropic quadratic, H = h I: B_simple = tr(Sigma)/|G|^2 is McCandlish's B_noise = tr(H Sigma)
// / G^T H G (Eq. 2.8), the critical batch, exactly, and the SGD law with eps_max = 1/h and that
// B_noise is Lemma 1's optimal lr exactly (laws_test). 1024 coordinates keep delta small from a
// start 16x below B_simple. Per token: sigma_i in [1, 2], mu scaled so that B_simple = 4096 tokens.
struct Isotropic {
  QuadraticProblem p;
  std::vector<double> mu;
};
Isotropic isotropic_problem(double h, double b_simple_tokens, int64_t n = 1024) {
  Isotropic r;
  double trace = 0.0, g2 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    r.p.h.push_back(h);
    r.p.sigma.push_back(1.0 + unit_open(mix(11, uint64_t(i))));
    r.p.theta_star.push_back(0.0);
    r.p.theta0.push_back(unit_open(mix(12, uint64_t(i))) - 0.5);
    trace += r.p.sigma.back() * r.p.sigma.back();
    g2 += h * h * r.p.theta0.back() * r.p.theta0.back();
  }
  const double c = std::sqrt(trace / g2 / b_simple_tokens);
  for (double& x : r.p.theta0) x *= c;
  r.mu = gaussian_model_at(r.p, r.p.theta0).mu;
  return r;
}

BatchScheduleOptions base_options() {
  BatchScheduleOptions o;
  o.seq = 64;
  o.micro_batch = 2;  // 128 tokens
  o.batch = 8;        // 4 micro-batches, 512 tokens
  o.max_batch = 4096;
  o.noise_multiple = 1.0;
  o.hysteresis = 0.25;
  o.patience = 10;
  o.min_observations = 200;
  o.law = Law::kSgd;
  o.law_params = {1.0, 4096.0};
  o.schedule = {0, int64_t(1) << 40, 1.0};  // constant: the lr is the law's
  return o;
}

TEST(BatchSchedule, tracks_the_critical_batch_and_the_sgd_optimal_lr_on_an_isotropic_quadratic) {
  const double h = 2.0;
  const Isotropic iso = isotropic_problem(h, 4096.0);
  const GaussianModel m = gaussian_model_at(iso.p, iso.p.theta0);
  const LawParams sgd = sgd_params(m);  // eps_max = 1/h, B_noise = B_simple
  ASSERT_NEAR(sgd.b_noise, 4096.0, 1e-6);
  for (double k : {1.0, 2.0}) {
    BatchScheduleOptions o = base_options();
    o.noise_multiple = k;
    o.law_params = sgd;
    BatchSchedule s(o);
    const Tracked r = run_fixed_point(s, iso.mu, iso.p.sigma, 0.99, 1500, 7);
    ASSERT_LE(r.delta_max, 0.15) << "outside the first-order regime of the derivation";
    const double tokens = double(s.state().batch * o.seq);
    std::cout << "K " << k << ": batch " << tokens << " tokens, K B_simple " << k * sgd.b_noise
              << ", band [" << lower_tokens(o, r.b_ref, r.delta) << ", " << r.upper_tokens
              << "], delta_max " << r.delta_max << "\n";
    EXPECT_LE(tokens, r.upper_tokens);
    EXPECT_GE(tokens, lower_tokens(o, r.b_ref, r.delta));
    // the lr: the SGD law is exact here, and monotone, so the band in batch brackets it
    EXPECT_NEAR(r.last.lr / lr_sgd_exact(m, double(r.last.batch_tokens)), 1.0, 1e-12);
    EXPECT_LE(s.next().lr, lr_sgd_exact(m, r.upper_tokens));
    EXPECT_GE(s.next().lr, lr_sgd_exact(m, lower_tokens(o, r.b_ref, r.delta)));
  }
}

// SGD with the schedule in the loop on an isotropic quadratic: the step's gradient is the mean of
// the micro-batch gradients the estimator sees, theta moves towards theta*, |G|^2 falls and
// B_simple rises (here 32x, to twice the cap). Every step the batch must stay within
// the band of Note [Tolerance of the tracked batch] around the moving B_ref (the EMAs of the true
// values along this trajectory: the smoothing's lag is by design, not an error): at most K max
// B_ref (1 + z delta) so far, and at least the lower bound at the smallest B_ref of the last 2
// patience windows (the last change, or the step that broke the streak, lies there). A small lr
// (eps_max 0.005/h) keeps B_simple's rise (0.1-0.4% a step) slow against the EMA's ~200-step
// memory; 256 coordinates keep delta below 0.05 from a start at half of B_simple.
TEST(BatchSchedule, follows_the_rising_noise_scale_of_a_converging_sgd_run) {
  const double h = 2.0;
  const Isotropic iso = isotropic_problem(h, 2048.0, 256);
  BatchScheduleOptions o = base_options();
  o.micro_batch = 8;  // 512 tokens
  o.batch = 16;       // 2 micro-batches, 1024 tokens
  o.max_batch = 512;  // 64 micro-batches, 32768 tokens
  o.law = Law::kSgd;
  o.law_params = {0.002 / h, 2048.0};
  const double beta = 0.99, micro_tokens = double(o.micro_batch * o.seq);
  BatchSchedule s(o);
  NoiseScaleEstimator est(NoiseScaleOptions{beta});
  RefEstimate ref(beta);
  std::vector<double> theta = iso.p.theta0, mu = iso.mu;
  std::vector<double> lower_window;  // per step: the lower bound at that step's B_ref
  double upper = 0.0, delta_max = 0.0;
  int64_t changes = 0, checked = 0;
  // until the true B_simple is twice the cap (past it, B_simple / batch and so delta grow
  // unbounded)
  for (int64_t step = 1; !(ref.b_ref() >= 2.0 * double(o.max_batch * o.seq)); ++step) {
    ASSERT_LT(step, 8000) << "B_simple does not rise";
    const StepPlan p = s.next();
    for (size_t i = 0; i < theta.size(); ++i) mu[i] = h * (theta[i] - iso.p.theta_star[i]);
    const std::vector<double> g =
        feed(est, mu, iso.p.sigma, micro_tokens, p.micro_batches, 5, step);
    ref.add(truth_of(mu, iso.p.sigma), micro_tokens, p.micro_batches);
    for (size_t i = 0; i < theta.size(); ++i) theta[i] -= p.lr * g[i];
    changes += s.observe(est.b_simple()).has_value();
    const double tokens = double(s.state().batch * o.seq);
    lower_window.push_back(lower_tokens(o, ref.b_ref(), ref.delta()));
    if (step < o.min_observations) continue;
    delta_max = std::max(delta_max, ref.delta());
    upper = std::max(upper, o.noise_multiple * ref.b_ref() * (1.0 + kZ * ref.delta()));
    EXPECT_LE(tokens, upper) << "step " << step;
    if (step - 2 * o.patience < o.min_observations) continue;
    const double lower =
        *std::min_element(lower_window.end() - 2 * o.patience - 1, lower_window.end());
    EXPECT_GE(tokens, lower) << "step " << step;
    ++checked;
  }
  std::cout << "sgd run: " << changes << " changes, batch " << s.state().batch * o.seq
            << " tokens, B_ref " << ref.b_ref() << ", true B_simple "
            << truth_of(mu, iso.p.sigma).b_simple() << ", delta_max " << delta_max << "\n";
  ASSERT_LE(delta_max, 0.15) << "outside the first-order regime of the derivation";
  EXPECT_GE(changes, 3);
  EXPECT_GT(checked, 100);
  EXPECT_EQ(s.state().batch, o.max_batch);  // B_simple passed the cap
}

// A rank-one quadratic, H = diag(h) + rho u u^T (quadratic_sim.h), where sign descent's optimal lr
// surges: 1024 coordinates (test::surge_problem's 32 leave B_simple too noisy to act on far below
// it), rho = 5, sigma 20x larger. Here the exact peak of Eq. 9 is 0.42 B_simple and 1.18 x Eq. 14's
// B_noise, and Eq. 16's eps_max is within 0.1% of the exact lr at the peak.
QuadraticProblem rank_one_problem() {
  constexpr int64_t n = 1024;
  QuadraticProblem p;
  p.rho = 5.0;
  for (int64_t i = 0; i < n; ++i) {
    const double sign = unit_open(mix(3, uint64_t(i))) < 0.5 ? -1.0 : 1.0;
    p.h.push_back(1.0 + 0.5 * unit_open(mix(1, uint64_t(i))));
    p.theta_star.push_back(0.0);
    p.theta0.push_back(sign * 0.05 * (1.0 + unit_open(mix(2, uint64_t(i)))));
    p.sigma.push_back(20.0 * (1.0 + unit_open(mix(4, uint64_t(i)))));
    p.u.push_back(sign / std::sqrt(double(n)));
  }
  return p;
}

// With K calibrated once as the exact peak over B_simple (what DESIGN.md section 3's sweep
// calibration measures), the batch tracks the surge peak within the band of Note [Tolerance of
// the tracked batch], and the lr the exact Eq. 9 optimum at the peak (the best lr of any batch)
// within: the surge law's change over the band (it is unimodal, so the band's ends and its
// maximum eps_max bound it) plus the law's own error at the peak, |lr_surge(peak) /
// lr_exact(peak) - 1|, both closed form.
TEST(BatchSchedule, calibrated_multiple_tracks_the_surge_peak_and_its_lr) {
  const QuadraticProblem p = rank_one_problem();
  const GaussianModel m = gaussian_model_at(p, p.theta0);
  const LawParams surge = surge_params(m);
  const Truth t = truth_of(m.mu, m.sigma);
  const double peak = sign_peak_batch_exact(m, surge.b_noise / 100, surge.b_noise * 100);
  BatchScheduleOptions o = base_options();
  o.seq = 1;  // the simulator's batch is in examples: one "token" each
  o.micro_batch = 64;
  o.batch = 256;
  o.max_batch = 64000;
  o.noise_multiple = peak / t.b_simple();
  o.law = Law::kSurge;
  o.law_params = surge;
  o.min_observations = 400;
  BatchSchedule s(o);
  const Tracked r = run_fixed_point(s, m.mu, m.sigma, 0.995, 2500, 9);
  ASSERT_LE(r.delta_max, 0.15) << "outside the first-order regime of the derivation";
  const double batch = double(s.state().batch);
  const double lo = lower_tokens(o, r.b_ref, r.delta), hi = r.upper_tokens;
  std::cout << "surge: batch " << batch << ", exact peak " << peak << " (Eq. 14 " << surge.b_noise
            << ", B_simple " << t.b_simple() << "), band [" << lo << ", " << hi << "], delta_max "
            << r.delta_max << "\n";
  EXPECT_LE(batch, hi);
  EXPECT_GE(batch, lo);
  const double best_lr = lr_sign_exact(m, peak);
  const double at_peak = lr_surge(peak, surge.eps_max, surge.b_noise);
  double shape = std::max(std::abs(lr_surge(lo, surge.eps_max, surge.b_noise) / at_peak - 1.0),
                          std::abs(lr_surge(hi, surge.eps_max, surge.b_noise) / at_peak - 1.0));
  if (lo <= surge.b_noise && surge.b_noise <= hi)
    shape = std::max(shape, surge.eps_max / at_peak - 1.0);
  const double law_error = std::abs(at_peak / best_lr - 1.0);
  std::cout << "surge: lr " << s.next().lr << ", best " << best_lr << ", shape " << shape
            << ", law error " << law_error << "\n";
  EXPECT_NEAR(s.next().lr / best_lr, 1.0, shape + law_error + 1e-12);
}

// B_simple sequences chosen by hand: rising, falling, oscillating inside the band, spiking.
TEST(BatchSchedule, batch_is_monotone_capped_on_the_micro_batch_grid_and_ignores_fluctuations) {
  BatchScheduleOptions o = base_options();
  o.min_observations = 1;
  o.patience = 3;
  o.max_batch = 64;  // 4096 tokens
  BatchSchedule s(o);
  std::vector<double> inputs;
  for (int i = 0; i < 20; ++i) inputs.push_back(512.0 * (i % 2 ? 1.2 : 0.8));  // inside the band
  for (int i = 0; i < 2; ++i) inputs.push_back(1e6);                           // a short spike
  inputs.push_back(600.0);
  for (int i = 0; i < 40; ++i) inputs.push_back(700.0 * std::pow(1.08, i));   // rising past the cap
  for (int i = 0; i < 40; ++i) inputs.push_back(14000.0 * std::pow(0.9, i));  // falling
  int64_t previous = s.state().batch, changes = 0, last_change = -100;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<BatchChange> c = s.observe(inputs[i]);
    const int64_t b = s.state().batch;
    EXPECT_GE(b, previous) << "step " << i + 1;
    EXPECT_LE(b, o.max_batch);
    EXPECT_EQ(b % o.micro_batch, 0);
    if (i < 23) {
      EXPECT_EQ(b, o.batch) << "fluctuation or spike changed the batch at " << i + 1;
    }
    if (c) {
      ++changes;
      EXPECT_GE(int64_t(i) - last_change, o.patience) << "two changes within the patience";
      last_change = int64_t(i);
      EXPECT_EQ(c->step, int64_t(i) + 1);
      EXPECT_EQ(c->old_batch, previous);
      EXPECT_EQ(c->batch, b);
      EXPECT_LE(double(c->batch_tokens), o.noise_multiple * c->b_simple);  // never above K B_simple
      EXPECT_GE(c->b_simple, (1.0 + o.hysteresis) * double(previous * o.seq));
      EXPECT_EQ(c->lr_law, s.law_lr_for(c->batch_tokens));
      EXPECT_EQ(c->to_json().at("event"), "batch_change");
    }
    previous = b;
  }
  EXPECT_EQ(s.state().batch, o.max_batch);
  EXPECT_GE(changes, 2);
  // unknown B_simple restarts the streak: no change without `patience` known values in a row
  BatchSchedule u(o);
  for (int i = 0; i < 30; ++i) u.observe(i % 3 == 2 ? std::nullopt : std::optional<double>(1e5));
  EXPECT_EQ(u.state().batch, o.batch);
}

// Two micro-batches per step: one micro-batch is half the batch, more than the hysteresis band,
// so the first steps above the band cannot add one. A slowly rising B_simple must still grow the
// batch once it passes the next micro-batch (memo train --batch 16 --micro-batch 8 once stayed at
// 16 sequences for a whole run while B_simple rose from 50 to 27,000 tokens: the streak's minimum
// was frozen at the first value above the band).
TEST(BatchSchedule, grows_when_the_band_lies_within_a_micro_batch_of_the_batch) {
  BatchScheduleOptions o = base_options();
  o.micro_batch = 4;  // 256 tokens
  o.batch = 8;        // 512 tokens: the band starts at 640, the next micro-batch at 768
  o.min_observations = 1;
  int64_t first_growth = -1;
  BatchSchedule s(o);
  for (int i = 0; i < 400 && first_growth < 0; ++i) {
    const double b_simple = 600.0 * std::pow(1.002, i);  // +0.2% a step: 640 at ~32, 768 at ~124
    if (s.observe(b_simple)) first_growth = i;
    if (first_growth < 0) {
      EXPECT_EQ(s.state().batch, 8) << "step " << i;
    }
  }
  ASSERT_GE(first_growth, 0) << "the batch never grew";
  EXPECT_EQ(s.state().batch, 12);  // 3 micro-batches: 768 tokens <= B_simple
  // no later than `patience` steps after every value of a streak lies above 768 tokens
  const int first_above_768 = int(std::ceil(std::log(768.0 / 600.0) / std::log(1.002)));
  EXPECT_LE(first_growth, first_above_768 + 2 * o.patience);
}

TEST(BatchSchedule, waits_for_min_observations_and_patience) {
  BatchScheduleOptions o = base_options();
  o.min_observations = 5;
  o.patience = 4;
  BatchSchedule s(o);
  for (int i = 1; i <= 7; ++i) {
    EXPECT_FALSE(s.observe(1e5)) << "step " << i;  // steps 5, 6, 7: streak 1..3
  }
  const std::optional<BatchChange> c = s.observe(1e5);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 8);
  EXPECT_EQ(c->batch, 1562);  // floor(1e5 / 128) = 781 micro-batches
  EXPECT_EQ(s.next().micro_batches, 781);
  EXPECT_EQ(s.state().tokens, 8 * 512);
}

// A run interrupted after every step, its state sent through JSON text and restored into a new
// schedule, continues exactly as the uninterrupted one: same plans, changes and state, bit for bit.
TEST(BatchSchedule, state_round_trips_through_json_and_a_restored_run_continues_bit_for_bit) {
  const Isotropic iso = isotropic_problem(2.0, 4096.0);
  BatchScheduleOptions o = base_options();
  o.law = Law::kSurge;
  o.law_params = {3e-3, 1000.0};
  o.schedule = {4096, 4096 * 300, 0.1};
  o.min_observations = 20;
  auto run = [&](bool restore_each_step) {
    std::vector<StepPlan> plans;
    std::vector<nlohmann::json> changes;
    NoiseScaleEstimator est(NoiseScaleOptions{0.9});
    auto s = std::make_unique<BatchSchedule>(o);
    while (!s->done()) {
      const StepPlan p = s->next();
      plans.push_back(p);
      feed(est, iso.mu, iso.p.sigma, 128.0, p.micro_batches, 3, p.step);
      if (auto c = s->observe(est.b_simple())) changes.push_back(c->to_json());
      if (restore_each_step) {
        const std::string text = to_json(s->state()).dump();
        const BatchScheduleState back = batch_schedule_state_from_json(nlohmann::json::parse(text));
        EXPECT_EQ(back, s->state());
        EXPECT_EQ(to_json(back).dump(), text);
        s = std::make_unique<BatchSchedule>(o, back);
      }
    }
    return std::make_tuple(plans, changes, s->state());
  };
  const auto [plans_a, changes_a, state_a] = run(false);
  const auto [plans_b, changes_b, state_b] = run(true);
  ASSERT_EQ(plans_a.size(), plans_b.size());
  ASSERT_GE(changes_a.size(), 1u);
  for (size_t i = 0; i < plans_a.size(); ++i) {
    EXPECT_EQ(plans_a[i].batch, plans_b[i].batch);
    EXPECT_EQ(std::memcmp(&plans_a[i].lr, &plans_b[i].lr, sizeof(double)), 0) << i;
  }
  EXPECT_EQ(changes_a, changes_b);
  EXPECT_EQ(state_a, state_b);
  // awkward doubles survive: subnormal, negative zero, the largest finite, 0.1
  for (double v : {4.9e-324, -0.0, 1.7976931348623157e308, 0.1}) {
    BatchScheduleState st;
    st.streak_min_b_simple = v;
    st.last_b_simple = v;
    const BatchScheduleState back =
        batch_schedule_state_from_json(nlohmann::json::parse(to_json(st).dump()));
    EXPECT_EQ(std::memcmp(&back.streak_min_b_simple, &v, sizeof v), 0) << v;
    EXPECT_EQ(std::memcmp(&*back.last_b_simple, &v, sizeof v), 0) << v;
  }
}

TEST(BatchSchedule, options_round_trip_through_json_for_the_checkpoint) {
  BatchScheduleOptions o = base_options();
  o.noise_multiple = 0.1;  // not a short binary fraction
  o.law = Law::kSurge;
  o.law_params = {1.0 / 3.0, 4096.0 * std::sqrt(2.0)};
  o.schedule = {1000, 123456789, 0.1};
  const BatchScheduleOptions back =
      batch_schedule_options_from_json(nlohmann::json::parse(to_json(o).dump()));
  EXPECT_EQ(to_json(back), to_json(o));
  EXPECT_EQ(back.noise_multiple, o.noise_multiple);
  EXPECT_EQ(back.law_params.eps_max, o.law_params.eps_max);
  EXPECT_EQ(back.law_params.b_noise, o.law_params.b_noise);
  EXPECT_EQ(back.schedule.min_lr_ratio, o.schedule.min_lr_ratio);
  EXPECT_EQ(back.law, Law::kSurge);
  nlohmann::json j = to_json(o);
  j["law"] = "power";
  EXPECT_NE(test::error_message<FormatError>([&] {
              batch_schedule_options_from_json(j);
            }).find("'law' must be \"surge\" or \"sgd\", got \"power\""),
            std::string::npos);
  j = to_json(o);
  j.erase("eps_max");
  EXPECT_NE(test::error_message<FormatError>([&] {
              batch_schedule_options_from_json(j);
            }).find("'eps_max' is missing"),
            std::string::npos);
}

TEST(BatchSchedule, corrupt_state_is_refused_with_the_field) {
  BatchScheduleOptions o = base_options();
  nlohmann::json j = to_json(BatchSchedule(o).state());
  j["last_b_simple"] = 3.5;
  EXPECT_NE(test::error_message<FormatError>([&] {
              batch_schedule_state_from_json(j);
            }).find("'last_b_simple' must be a hex-float string"),
            std::string::npos);
  j["last_b_simple"] = "0x1.8p+1junk";
  EXPECT_NE(test::error_message<FormatError>([&] {
              batch_schedule_state_from_json(j);
            }).find("is not a double"),
            std::string::npos);
  j = to_json(BatchSchedule(o).state());
  j.erase("streak");
  EXPECT_NE(test::error_message<FormatError>([&] {
              batch_schedule_state_from_json(j);
            }).find("'streak' must be an integer"),
            std::string::npos);
  BatchScheduleState st = BatchSchedule(o).state();
  st.batch = 9;  // not a multiple of the micro-batch
  EXPECT_NE(test::error_message<FormatError>([&] { (void)BatchSchedule(o, st); }).find("batch 9"),
            std::string::npos);
}

// For a constant batch the token schedule is the step schedule (train/schedule.h): the same
// expressions over the same real ratios, equal up to how the compiler fuses a * b + c into an FMA
// at each call site (GCC's C++ default -ffp-contract=fast): within 1e-15 relative, a few ulp.
TEST(BatchSchedule, token_schedule_equals_the_step_schedule_for_a_constant_batch) {
  const int64_t b = 8 * 64, warmup = 10, steps = 200;
  const LrSchedule by_step{3e-3, 3e-3 * 0.1, warmup, steps};
  const TokenLrSchedule by_token{warmup * b, steps * b, 0.1};
  for (int64_t step = 1; step <= steps + 5; ++step)
    EXPECT_NEAR(by_token.lr(3e-3, step * b) / by_step.at(step), 1.0, 1e-15) << "step " << step;
  EXPECT_EQ(by_token.lr(3e-3, warmup * b), 3e-3);
  EXPECT_LT(by_token.lr(3e-3, warmup * b - 1), 3e-3);
  EXPECT_EQ(by_token.lr(3e-3, steps * b), 3e-3 * 0.1);
}

TEST(BatchSchedule, step_lr_is_the_law_for_the_batch_times_the_token_schedule) {
  BatchScheduleOptions o = base_options();
  o.law = Law::kSurge;
  o.law_params = {2e-3, 2048.0};
  o.schedule = {2048, 1 << 20, 0.1};
  o.min_observations = 1;
  o.patience = 1;
  BatchSchedule s(o);
  EXPECT_EQ(s.next().lr_law, lr_surge(512.0, 2e-3, 2048.0));
  EXPECT_EQ(s.next().lr, o.schedule.lr(lr_surge(512.0, 2e-3, 2048.0), 512));
  s.observe(std::nullopt);
  ASSERT_TRUE(s.observe(2048.0));  // grows to 2048 tokens = B_noise: the surge peak, eps_max
  const StepPlan p = s.next();
  EXPECT_EQ(p.batch_tokens, 2048);
  EXPECT_EQ(p.tokens_end, 1024 + 2048);
  EXPECT_DOUBLE_EQ(p.lr_law, 2e-3);
  EXPECT_EQ(p.lr, o.schedule.lr(p.lr_law, 3072));
  EXPECT_EQ(law_for_optimizer("sgd"), Law::kSgd);
  for (const char* name : {"adam", "adamw", "signsgd", "lion", "rmsprop"})
    EXPECT_EQ(law_for_optimizer(name), Law::kSurge) << name;
}

// The law's parameters from a sweep, as memo fit fits them: a sweep whose per-batch losses are
// parabolas in log lr around the surge law's optimum (so each optimal lr is exact and only the
// Levenberg-Marquardt tolerance remains) gives its eps_max and B_noise back.
TEST(BatchSchedule, law_params_come_from_a_sweep_fit) {
  SweepFile file;
  int64_t line = 0;
  for (double b : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
    const double opt = lr_surge(b, 1e-3, 2000.0);
    for (int k = -4; k <= 4; ++k) {
      const double lr = 1e-3 * std::pow(2.0, 0.5 * k), d = std::log(lr / opt);
      file.lines.push_back(
          {++line,
           {{"optimizer", "adam"}, {"lr", lr}, {"batch_tokens", b}, {"val_loss", 2.0 + d * d}}});
    }
  }
  const SweepAnalysis a = analyse_sweep(file, "sweep.jsonl", {});
  const LawParams surge = law_params_from_sweep(a, Law::kSurge);
  EXPECT_NEAR(surge.eps_max / 1e-3, 1.0, 1e-3);
  EXPECT_NEAR(surge.b_noise / 2000.0, 1.0, 1e-3);
  const LawParams sgd = law_params_from_sweep(a, Law::kSgd);
  EXPECT_GT(sgd.b_noise, 0.0);
  BatchScheduleOptions o = base_options();
  o.law = Law::kSurge;
  o.law_params = surge;
  EXPECT_NEAR(BatchSchedule(o).law_lr_for(2000) / 1e-3, 1.0, 2e-3);  // the peak: eps_max
  EXPECT_NE(test::error_message<ConfigError>([&] {
              law_params_from_sweep(a, Law::kPower);
            }).find("--law power is not surge or sgd"),
            std::string::npos);
  // a fit at the edge of its range (B_noise 0) sets no lr: refused, naming the sweep
  SweepAnalysis edge = a;
  for (LawFit& f : edge.laws.fits)
    if (f.law == Law::kSgd) f.params.at(1) = 0.0;
  EXPECT_NE(test::error_message<ConfigError>([&] {
              law_params_from_sweep(edge, Law::kSgd);
            }).find("--fit sweep.jsonl: the sgd law's fit puts B_noise at 0 tokens"),
            std::string::npos);
}

TEST(BatchSchedule, bad_options_name_the_flag_and_the_allowed_range) {
  struct Case {
    void (*edit)(BatchScheduleOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](BatchScheduleOptions& o) { o.noise_multiple = 0.0; },
       "--noise-multiple 0 is outside (0, 1e6]"},
      {[](BatchScheduleOptions& o) { o.max_batch = 6; },
       "--max-batch 6 must be a multiple of --micro-batch 2 in [--batch 8, inf)"},
      {[](BatchScheduleOptions& o) { o.max_batch = 9; },
       "--max-batch 9 must be a multiple of --micro-batch 2"},
      {[](BatchScheduleOptions& o) { o.batch = 2; },
       "--batch 2 must be a multiple of --micro-batch 2 and at least 2 micro-batches (4)"},
      {[](BatchScheduleOptions& o) { o.batch = 7; }, "--batch 7 must be a multiple"},
      {[](BatchScheduleOptions& o) { o.hysteresis = -0.1; },
       "--noise-hysteresis -0.1 is outside [0, 10]"},
      {[](BatchScheduleOptions& o) { o.patience = 0; }, "--noise-patience 0 must be >= 1"},
      {[](BatchScheduleOptions& o) { o.min_observations = 0; }, "--noise-min-steps 0 must be >= 1"},
      {[](BatchScheduleOptions& o) { o.law_params.eps_max = -1.0; },
       "--eps-max -1 must be positive and finite"},
      {[](BatchScheduleOptions& o) { o.law_params.b_noise = 0.0; },
       "--b-noise 0 tokens must be positive and finite"},
      {[](BatchScheduleOptions& o) { o.law = Law::kPower; }, "--law power is not surge or sgd"},
      {[](BatchScheduleOptions& o) { o.schedule.warmup_tokens = o.schedule.total_tokens + 1; },
       "--warmup of 1099511627777 tokens is outside [0, 1099511627776]"},
      {[](BatchScheduleOptions& o) { o.schedule.min_lr_ratio = 1.5; },
       "--min-lr-ratio 1.5 is outside [0, 1]"},
      {[](BatchScheduleOptions& o) { o.micro_batch = 0; }, "--micro-batch 0 must be positive"},
  };
  for (const Case& c : cases) {
    BatchScheduleOptions o = base_options();
    c.edit(o);
    const std::string msg = test::error_message<ConfigError>([&] { BatchSchedule s(o); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The batch grows to the smallest B_simple of the streak that passed the band.
TEST(BatchSchedule, grows_to_the_streaks_smallest_b_simple) {
  BatchScheduleOptions o = base_options();
  o.min_observations = 1;
  o.patience = 3;
  BatchSchedule s(o);
  EXPECT_FALSE(s.observe(4000.0));
  EXPECT_FALSE(s.observe(2000.0));
  const std::optional<BatchChange> c = s.observe(8000.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->b_simple, 2000.0);
  EXPECT_EQ(c->batch, 30);  // floor(2000 / 128) = 15 micro-batches of 2
}

}  // namespace
}  // namespace memo::scaling
