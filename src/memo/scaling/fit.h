// Fitting learning-rate laws to sweeps (surge paper Section 3.2 / App. G; DESIGN.md section 3):
// per batch size the optimal lr of a sweep, least-squares fits in log space of the surge, SGD and
// power laws with confidence intervals and a verdict, and the target-loss analysis (Eq. 22-24).
// Not here: running sweeps (the CLI) or the laws themselves (laws.h).
#pragma once

#include <string>
#include <vector>

#include "memo/scaling/laws.h"

namespace memo::scaling {

struct SweepRun {
  double batch = 0.0;  // tokens per step (or examples): the unit every B in the fit takes
  double lr = 0.0;
  double loss = 0.0;  // final or best loss; NaN or inf for a diverged run
};

struct OptimalLr {
  double batch = 0.0;
  double lr = 0.0;            // interpolated optimum
  double loss = 0.0;          // the best observed loss at this batch size
  bool at_grid_edge = false;  // the best lr was the smallest or largest tried: lr is a bound
  int lrs_tried = 0;
};

// For each batch size (ascending), the lr minimising the loss: runs with the same (batch, lr)
// are averaged (seeds); the best grid point and its two neighbours define a parabola in log lr
// whose vertex, clamped to the neighbours, is the optimum. At a grid edge, or with fewer than
// three finite losses around the best, the best grid lr itself (at_grid_edge says which).
// Throws ConfigError for an empty sweep or a non-positive batch or lr.
std::vector<OptimalLr> optimal_lrs(const std::vector<SweepRun>& runs);

// Note [Law fits]
// Each law is fitted to log(lr_k) over x_k = log(B_k) by Levenberg-Marquardt (our own, below)
// in the coordinates a = log(eps_max), u = log(B_noise or B_star) [, alpha]. In these
// coordinates the surge law is a - log cosh((u - x)/2) and the SGD law a - softplus(u - x), so
// a enters linearly and, for each start u_0 (every observed log B), a_0 is the mean residual.
// The best of the starts is kept. Standard errors: s^2 (J^T J)^-1, s^2 = RSS / (n - p); the
// intervals are t-quantile intervals in the fit coordinates, so exp() makes them asymmetric in
// eps_max and B_noise. AIC = n log(RSS/n) + 2p (Gaussian residuals, constants dropped) and
// AICc = AIC + 2p(p + 1)/(n - p - 1), its small-sample correction (Hurvich & Tsai 1989): a sweep
// has 5-15 batch sizes, where plain AIC lets the 3-parameter power law win on noise alone (it
// nests the SGD law at alpha = 1), so the verdict uses AICc.
struct LawFit {
  Law law = Law::kSurge;
  std::vector<double> params;  // natural units, law_lr's order
  std::vector<double> ci_low;  // confidence interval per parameter (NaN when n = p)
  std::vector<double> ci_high;
  std::vector<double> std_errors;  // in the fit coordinates (log for eps and B)
  std::vector<double> residuals;   // log(lr_k) - log(law(B_k)), in the points' order
  double rss = 0.0;                // sum of squared residuals
  double aic = 0.0;
  double aicc = 0.0;   // +inf when n <= p + 1
  int dof = 0;         // n - p
  int iterations = 0;  // Levenberg-Marquardt iterations of the best start
};

// Fits one law to (batch, lr) points (at_grid_edge points included: they are still the best
// measured). Throws ConfigError with fewer points than parameters or a non-positive value.
LawFit fit_law(Law law, const std::vector<OptimalLr>& points, double confidence = 0.95);

struct LawComparison {
  std::vector<LawFit> fits;  // surge, sgd, power (power only with >= 3 points)
  Law best_by_rss = Law::kSurge;
  Law best_by_aic = Law::kSurge;
  Law best_by_aicc = Law::kSurge;  // the verdict: penalises the power law's third parameter
  std::string summary() const;     // one line per law: parameters, intervals, RSS, AIC, AICc
};
LawComparison fit_laws(const std::vector<OptimalLr>& points, double confidence = 0.95);

// Target-loss analysis (surge Section 3.2, App. G, Eq. 22): steps S and examples (or tokens)
// E = B S to reach one target loss, one pair per batch size at its best lr.
struct StepsToTarget {
  double steps = 0.0;
  double examples = 0.0;  // E, in the unit of B
};
struct TargetLossFit {
  double b_noise = 0.0;  // -slope = E_min / S_min
  double s_min = 0.0;    // 1 / intercept
  double e_min = 0.0;    // b_noise * s_min
  double slope = 0.0, intercept = 0.0;
  double slope_se = 0.0, intercept_se = 0.0;
  double b_noise_ci_low = 0.0, b_noise_ci_high = 0.0;
  std::vector<double> residuals;  // 1/S_k - line(1/E_k)
  double rss = 0.0;
};
// Ordinary least squares of 1/S = -B_noise (1/E) + 1/S_min (Eq. 22, from (S/S_min - 1)(E/E_min -
// 1) = 1, Eq. 20). Throws ConfigError with fewer than 2 pairs or non-positive values, and when
// the fitted slope or intercept has the wrong sign (no B_noise > 0, S_min > 0).
TargetLossFit fit_steps_to_target(const std::vector<StepsToTarget>& pairs,
                                  double confidence = 0.95);

// eps_max given B_noise, as the paper: the mean over batch sizes of each optimal lr divided by the
// law's shape. Eq. 23 (surge law): mean_k eps_k / 2 (sqrt(B_n/B_k) + sqrt(B_k/B_n)); Eq. 24
// (power law, alpha = 1 for SGD, 0.5 for the older Adam rule): mean_k eps_k (1 + B_n/B_k)^alpha.
double eps_max_surge(const std::vector<OptimalLr>& points, double b_noise);
double eps_max_power(const std::vector<OptimalLr>& points, double b_noise, double alpha);

// The p-quantile of Student's t with dof degrees of freedom (regularised incomplete beta,
// bisection); dof >= 1, 0 < p < 1.
double student_t_quantile(double p, int dof);

}  // namespace memo::scaling
