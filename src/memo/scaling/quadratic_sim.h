// A simulated quadratic problem for checking the learning-rate laws end to end (the Gaussian
// gradient model of the surge paper, arXiv 2405.14578, Section 3): L(theta) = 0.5 (theta -
// theta*)^T H (theta - theta*) with H = diag(h) + rho u u^T and a batch-B gradient H (theta -
// theta*) + sigma / sqrt(B) z, z ~ N(0, I) per coordinate. rho = 0 gives the separable L = 0.5
// sum_i h_i (theta_i - theta*_i)^2; the rank-one term is what makes sign descent's optimal lr
// surge: with a diagonal H, surge Eq. 9 reduces to sum_i E_i mu_i / tr(H), which rises
// monotonically in B (no peak, Eq. 14's B_noise is infinite). Not a model of training: a check that
// sweeps and fits recover the known B_noise.
#pragma once

#include <cstdint>
#include <vector>

#include "memo/scaling/fit.h"
#include "memo/scaling/laws.h"

namespace memo::scaling {

struct QuadraticProblem {
  std::vector<double> h;           // [n] diagonal curvature, > 0
  double rho = 0.0;                // weight of the rank-one term, >= 0
  std::vector<double> u;           // [n] its direction (any norm; empty when rho = 0)
  std::vector<double> theta_star;  // [n] minimiser
  std::vector<double> sigma;       // [n] per-example gradient noise std, > 0
  std::vector<double> theta0;      // [n] where every run starts
  int64_t size() const { return int64_t(h.size()); }
};

void check_problem(const QuadraticProblem& problem);  // throws ConfigError naming the field

double quadratic_loss(const QuadraticProblem& problem, const std::vector<double>& theta);
// The Gaussian gradient model at theta: mu = H (theta - theta*), sigma, dense H.
GaussianModel gaussian_model_at(const QuadraticProblem& problem, const std::vector<double>& theta);

enum class SimOptimizer { kSign, kSgd };  // theta -= lr sign(g)  |  theta -= lr g

// `steps` steps at (lr, batch) from theta0; the losses after each step. Deterministic: the noise
// of step t, coordinate i is a pure function of (seed, t, i) (core/random.h), so runs that differ
// only in lr see the same noise (common random numbers across a sweep).
std::vector<double> simulate(const QuadraticProblem& problem, SimOptimizer optimizer, double lr,
                             double batch, int64_t steps, uint64_t seed);

// Note [Simulated sweep]
// The surge and SGD laws are for the lr that maximises the expected one-step loss decrease at
// the current point (surge Lemma 1 / App. B), and on a quadratic the second-order model is exact.
// So the sweep measures, for each (batch, lr), the loss after `steps` steps (1 matches the theory
// exactly; a few small-lr steps nearly) averaged over `seeds` seeds; optimal_lrs() then picks and
// interpolates the best lr per batch. Batch size j uses seeds first_seed + j seeds + [0, seeds):
// the same seeds for every lr of one batch size (common random numbers: the loss is a smooth
// function of lr, so its argmin is far less noisy than with fresh noise per lr), and different
// seeds for different batch sizes, so the per-batch errors are independent, as in a real sweep
// (shared seeds would make them correlated across B, a smooth bias that a law can absorb).
std::vector<SweepRun> simulate_sweep(const QuadraticProblem& problem, SimOptimizer optimizer,
                                     const std::vector<double>& batches,
                                     const std::vector<double>& lrs, int64_t steps, int64_t seeds,
                                     uint64_t first_seed);

// The exact optimal lr of one step from theta0: surge Eq. 9 for sign descent (erf formula),
// Lemma 1 for SGD.
double optimal_lr_exact(const QuadraticProblem& problem, SimOptimizer optimizer, double batch);

}  // namespace memo::scaling
