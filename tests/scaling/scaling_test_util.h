// The test problem shared by the scaling tests: 32 coordinates, heterogeneous curvature and
// noise, and a strong rank-one Hessian term along sign(theta0 - theta*) so sign descent surges.
#pragma once

#include <cmath>

#include "memo/core/random.h"
#include "memo/scaling/quadratic_sim.h"

namespace memo::test {

// rho = 30 against diagonal curvature 1..1.5 keeps the whole sweep inside surge Theorem 3's
// small-batch regime (min_i pi sigma_i^2 / (2 mu_i^2) is about 6 B_noise), where the surge law
// is accurate; sigma is scaled so that B_noise is about 50.
inline scaling::QuadraticProblem surge_problem(double rho = 30.0) {
  constexpr int64_t n = 32;
  auto uniform = [](uint64_t stream, int64_t i) { return unit_open(mix(stream, uint64_t(i))); };
  scaling::QuadraticProblem p;
  p.rho = rho;
  for (int64_t i = 0; i < n; ++i) {
    const double sign = uniform(3, i) < 0.5 ? -1.0 : 1.0;
    p.h.push_back(1.0 + 0.5 * uniform(1, i));
    p.theta_star.push_back(0.0);
    p.theta0.push_back(sign * 0.05 * (1.0 + uniform(2, i)));
    p.sigma.push_back(50.0 * (1.0 + uniform(4, i)));
    p.u.push_back(sign / std::sqrt(double(n)));
  }
  return p;
}

}  // namespace memo::test
