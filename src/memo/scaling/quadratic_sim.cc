#include "memo/scaling/quadratic_sim.h"

#include <cmath>

#include "memo/core/error.h"
#include "memo/core/random.h"

namespace memo::scaling {

namespace {

// H v = h o v + rho u (u . v): O(n), no dense H on the simulation path.
void hessian_times(const QuadraticProblem& p, const std::vector<double>& v,
                   std::vector<double>& out) {
  const size_t n = v.size();
  double uv = 0.0;
  if (p.rho != 0.0)
    for (size_t i = 0; i < n; ++i) uv += p.u[i] * v[i];
  for (size_t i = 0; i < n; ++i)
    out[i] = p.h[i] * v[i] + (p.rho != 0.0 ? p.rho * p.u[i] * uv : 0.0);
}

}  // namespace

void check_problem(const QuadraticProblem& p) {
  const size_t n = p.h.size();
  if (n == 0 || p.theta_star.size() != n || p.sigma.size() != n || p.theta0.size() != n ||
      (p.rho != 0.0 && p.u.size() != n))
    throw ConfigError(str("quadratic problem sizes disagree: h ", n, ", theta_star ",
                          p.theta_star.size(), ", sigma ", p.sigma.size(), ", theta0 ",
                          p.theta0.size(), ", u ", p.u.size()));
  if (!(p.rho >= 0.0)) throw ConfigError(str("quadratic problem rho ", p.rho, " must be >= 0"));
  for (size_t i = 0; i < n; ++i)
    if (!(p.h[i] > 0.0 && p.sigma[i] > 0.0))
      throw ConfigError(str("quadratic problem h[", i, "] = ", p.h[i], " and sigma[", i,
                            "] = ", p.sigma[i], " must be > 0"));
}

double quadratic_loss(const QuadraticProblem& p, const std::vector<double>& theta) {
  const size_t n = theta.size();
  double diag = 0.0, ud = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = theta[i] - p.theta_star[i];
    diag += p.h[i] * d * d;
    if (p.rho != 0.0) ud += p.u[i] * d;
  }
  return 0.5 * (diag + p.rho * ud * ud);
}

GaussianModel gaussian_model_at(const QuadraticProblem& p, const std::vector<double>& theta) {
  check_problem(p);
  const size_t n = p.h.size();
  GaussianModel m;
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = theta[i] - p.theta_star[i];
  m.mu.resize(n);
  hessian_times(p, d, m.mu);
  m.sigma = p.sigma;
  m.hessian.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      m.hessian[i * n + j] =
          (i == j ? p.h[i] : 0.0) + (p.rho != 0.0 ? p.rho * p.u[i] * p.u[j] : 0.0);
  return m;
}

std::vector<double> simulate(const QuadraticProblem& p, SimOptimizer optimizer, double lr,
                             double batch, int64_t steps, uint64_t seed) {
  check_problem(p);
  if (!(batch > 0.0 && lr >= 0.0 && steps >= 0))
    throw ConfigError(
        str("simulate: batch ", batch, " must be > 0, lr ", lr, " >= 0, steps ", steps, " >= 0"));
  const size_t n = p.h.size();
  const double noise_scale = 1.0 / std::sqrt(batch);
  std::vector<double> theta = p.theta0, d(n), g(n), losses;
  for (int64_t t = 0; t < steps; ++t) {
    for (size_t i = 0; i < n; ++i) d[i] = theta[i] - p.theta_star[i];
    hessian_times(p, d, g);
    NormalStream z(seed, uint64_t(t));
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i] + p.sigma[i] * noise_scale * z.next();
      const double v = optimizer == SimOptimizer::kSign ? double((gi > 0.0) - (gi < 0.0)) : gi;
      theta[i] -= lr * v;
    }
    losses.push_back(quadratic_loss(p, theta));
  }
  return losses;
}

std::vector<SweepRun> simulate_sweep(const QuadraticProblem& p, SimOptimizer optimizer,
                                     const std::vector<double>& batches,
                                     const std::vector<double>& lrs, int64_t steps, int64_t seeds,
                                     uint64_t first_seed) {
  if (steps < 1 || seeds < 1)
    throw ConfigError(str("simulate_sweep: steps ", steps, " and seeds ", seeds, " must be >= 1"));
  std::vector<SweepRun> runs;
  for (size_t b = 0; b < batches.size(); ++b) {
    const uint64_t seed0 = first_seed + uint64_t(b) * uint64_t(seeds);  // own seeds per batch
    for (double lr : lrs) {
      double sum = 0.0;
      for (int64_t s = 0; s < seeds; ++s)
        sum += simulate(p, optimizer, lr, batches[b], steps, seed0 + uint64_t(s)).back();
      runs.push_back({batches[b], lr, sum / double(seeds)});
    }
  }
  return runs;
}

double optimal_lr_exact(const QuadraticProblem& p, SimOptimizer optimizer, double batch) {
  const GaussianModel m = gaussian_model_at(p, p.theta0);
  return optimizer == SimOptimizer::kSign ? lr_sign_exact(m, batch) : lr_sgd_exact(m, batch);
}

}  // namespace memo::scaling
