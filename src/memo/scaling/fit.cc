#include "memo/scaling/fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "memo/core/error.h"

namespace memo::scaling {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kMaxParams = 3;

// ---- optimal lr per batch size ----

// Vertex of the parabola through (x0,y0), (x1,y1), (x2,y2) with y1 the smallest, clamped to
// [x0, x2]; x1 itself when the three are collinear.
double parabola_vertex(double x0, double y0, double x1, double y1, double x2, double y2) {
  const double p = (x1 - x0) * (y1 - y2), q = (x1 - x2) * (y1 - y0);
  const double den = p - q;
  if (!(std::abs(den) > 0.0)) return x1;
  const double x = x1 - 0.5 * ((x1 - x0) * p - (x1 - x2) * q) / den;
  return std::clamp(x, x0, x2);
}

// ---- the laws in fit coordinates (see Note [Law fits]) ----

double softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))); }
double sigmoid(double z) {
  return z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z));
}
double log_cosh(double z) {
  const double a = std::abs(z);
  return a + std::log1p(std::exp(-2.0 * a)) - std::log(2.0);
}

// log lr at x = log B for theta = (a, u[, alpha]); grad = d/dtheta.
double model(Law law, const double* theta, double x, double* grad) {
  const double a = theta[0], u = theta[1];
  grad[0] = 1.0;
  switch (law) {
    case Law::kSurge: {
      const double z = 0.5 * (u - x);
      grad[1] = -0.5 * std::tanh(z);
      return a - log_cosh(z);
    }
    case Law::kSgd:
      grad[1] = -sigmoid(u - x);
      return a - softplus(u - x);
    case Law::kPower: {
      const double alpha = theta[2], z = u - x;
      grad[1] = -alpha * sigmoid(z);
      grad[2] = -softplus(z);
      return a - alpha * softplus(z);
    }
  }
  return 0.0;
}

// Solves A x = b (p x p, row-major) by Gauss-Jordan with partial pivoting; false if singular.
bool solve(int p, double A[kMaxParams][kMaxParams], double* b,
           double inverse[kMaxParams][kMaxParams]) {
  double M[kMaxParams][2 * kMaxParams + 1];
  for (int i = 0; i < p; ++i) {
    for (int j = 0; j < p; ++j) M[i][j] = A[i][j], M[i][p + j] = i == j ? 1.0 : 0.0;
    M[i][2 * p] = b[i];
  }
  for (int c = 0; c < p; ++c) {
    int piv = c;
    for (int r = c + 1; r < p; ++r)
      if (std::abs(M[r][c]) > std::abs(M[piv][c])) piv = r;
    if (!(std::abs(M[piv][c]) > 1e-300)) return false;
    for (int j = 0; j <= 2 * p; ++j) std::swap(M[c][j], M[piv][j]);
    const double inv = 1.0 / M[c][c];
    for (int j = 0; j <= 2 * p; ++j) M[c][j] *= inv;
    for (int r = 0; r < p; ++r) {
      if (r == c) continue;
      const double f = M[r][c];
      for (int j = 0; j <= 2 * p; ++j) M[r][j] -= f * M[c][j];
    }
  }
  for (int i = 0; i < p; ++i) {
    b[i] = M[i][2 * p];
    if (inverse)
      for (int j = 0; j < p; ++j) inverse[i][j] = M[i][p + j];
  }
  return true;
}

struct Problem {
  Law law;
  int p;
  std::vector<double> x, y;  // log B, log lr
};

// Residuals y - f, the normal matrix J^T J and J^T r at theta; returns the RSS.
double evaluate(const Problem& pr, const double* theta, std::vector<double>* r,
                double JtJ[kMaxParams][kMaxParams], double* Jtr) {
  double rss = 0.0, grad[kMaxParams];
  for (int i = 0; i < pr.p; ++i) {
    Jtr[i] = 0.0;
    for (int j = 0; j < pr.p; ++j) JtJ[i][j] = 0.0;
  }
  for (size_t k = 0; k < pr.x.size(); ++k) {
    const double res = pr.y[k] - model(pr.law, theta, pr.x[k], grad);
    if (r) (*r)[k] = res;
    rss += res * res;
    for (int i = 0; i < pr.p; ++i) {
      Jtr[i] += grad[i] * res;
      for (int j = 0; j < pr.p; ++j) JtJ[i][j] += grad[i] * grad[j];
    }
  }
  return std::isfinite(rss) ? rss : kInf;
}

// Levenberg-Marquardt from theta (updated in place); returns the iterations used.
int levenberg_marquardt(const Problem& pr, double* theta, double* rss_out) {
  double JtJ[kMaxParams][kMaxParams], Jtr[kMaxParams];
  double rss = evaluate(pr, theta, nullptr, JtJ, Jtr);
  double lambda = 1e-3;
  int it = 0;
  for (; it < 500 && lambda < 1e12; ++it) {
    double A[kMaxParams][kMaxParams], step[kMaxParams], trial[kMaxParams];
    for (int i = 0; i < pr.p; ++i) {
      for (int j = 0; j < pr.p; ++j) A[i][j] = JtJ[i][j];
      A[i][i] += lambda * std::max(JtJ[i][i], 1e-12);
      step[i] = Jtr[i];
    }
    if (!solve(pr.p, A, step, nullptr)) {
      lambda *= 10.0;
      continue;
    }
    for (int i = 0; i < pr.p; ++i) trial[i] = theta[i] + step[i];
    double JtJ2[kMaxParams][kMaxParams], Jtr2[kMaxParams];
    const double rss2 = evaluate(pr, trial, nullptr, JtJ2, Jtr2);
    if (rss2 < rss) {
      const bool done = rss - rss2 <= 1e-14 * (1.0 + rss);
      std::copy(trial, trial + pr.p, theta);
      std::copy(&JtJ2[0][0], &JtJ2[0][0] + kMaxParams * kMaxParams, &JtJ[0][0]);
      std::copy(Jtr2, Jtr2 + pr.p, Jtr);
      rss = rss2;
      lambda = std::max(lambda / 10.0, 1e-12);
      if (done) break;
    } else {
      lambda *= 10.0;
    }
  }
  *rss_out = rss;
  return it;
}

// ---- Student's t ----

// Continued fraction of the regularised incomplete beta (DLMF 8.17.22), modified Lentz.
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  d = 1.0 / (std::abs(d) < kTiny ? kTiny : d);
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    for (int half = 0; half < 2; ++half) {
      const double coef = half == 0 ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
                                    : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1.0 + coef * d;
      d = 1.0 / (std::abs(d) < kTiny ? kTiny : d);
      c = 1.0 + coef / c;
      if (std::abs(c) < kTiny) c = kTiny;
      h *= c * d;
      if (half == 1 && std::abs(c * d - 1.0) < 1e-15) return h;
    }
  }
  return h;
}

double incomplete_beta(double a, double b, double x) {  // I_x(a, b)
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

double student_t_cdf(double t, int dof) {
  const double nu = dof;
  const double tail = 0.5 * incomplete_beta(0.5 * nu, 0.5, nu / (nu + t * t));
  return t >= 0 ? 1.0 - tail : tail;
}

void check_points(const std::vector<OptimalLr>& points) {
  for (const OptimalLr& pt : points)
    if (!(pt.batch > 0.0 && pt.lr > 0.0 && std::isfinite(pt.batch) && std::isfinite(pt.lr)))
      throw ConfigError(str("law fit point (batch ", pt.batch, ", lr ", pt.lr,
                            ") must have a positive, finite batch and lr"));
}

}  // namespace

double student_t_quantile(double p, int dof) {
  if (!(p > 0.0 && p < 1.0) || dof < 1)
    throw ConfigError(str("t quantile needs 0 < p < 1 and dof >= 1, got p ", p, ", dof ", dof));
  if (p < 0.5) return -student_t_quantile(1.0 - p, dof);
  double lo = 0.0, hi = 1.0;
  while (student_t_cdf(hi, dof) < p) hi *= 2.0;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, dof) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<OptimalLr> optimal_lrs(const std::vector<SweepRun>& runs) {
  if (runs.empty()) throw ConfigError("optimal_lrs: the sweep has no runs");
  std::map<double, std::map<double, std::pair<double, int>>> grid;  // batch -> lr -> (sum, n)
  for (const SweepRun& r : runs) {
    if (!(r.batch > 0.0 && r.lr > 0.0))
      throw ConfigError(
          str("sweep run with batch ", r.batch, " and lr ", r.lr, ": both must be positive"));
    auto& cell = grid[r.batch][r.lr];
    cell.first += std::isfinite(r.loss) ? r.loss : kInf;  // a diverged seed spoils its cell
    cell.second += 1;
  }
  std::vector<OptimalLr> out;
  for (const auto& [batch, by_lr] : grid) {
    std::vector<double> x, y;  // log lr ascending, mean loss
    for (const auto& [lr, cell] : by_lr) {
      x.push_back(std::log(lr));
      y.push_back(cell.first / cell.second);
    }
    const size_t n = x.size();
    size_t best = 0;
    for (size_t k = 1; k < n; ++k)
      if (y[k] < y[best]) best = k;
    OptimalLr o{batch, std::exp(x[best]), y[best], true, int(n)};
    if (best > 0 && best + 1 < n && std::isfinite(y[best - 1]) && std::isfinite(y[best + 1])) {
      o.lr = std::exp(
          parabola_vertex(x[best - 1], y[best - 1], x[best], y[best], x[best + 1], y[best + 1]));
      o.at_grid_edge = false;
    }
    out.push_back(o);
  }
  return out;
}

LawFit fit_law(Law law, const std::vector<OptimalLr>& points, double confidence) {
  check_points(points);
  const int p = law_param_count(law), n = int(points.size());
  if (n < p)
    throw ConfigError(str("the ", law_name(law), " law has ", p, " parameters but only ", n,
                          " batch sizes were given; sweep at least ", p, " batch sizes"));
  if (!(confidence > 0.0 && confidence < 1.0))
    throw ConfigError(str("--confidence ", confidence, " must be in (0, 1)"));
  Problem pr{law, p, {}, {}};
  for (const OptimalLr& pt : points) {
    pr.x.push_back(std::log(pt.batch));
    pr.y.push_back(std::log(pt.lr));
  }
  // Multi-start: u_0 at every observed log B and one step beyond each end (see Note [Law fits]).
  std::vector<double> u_starts = pr.x;
  const auto [x_min, x_max] = std::minmax_element(pr.x.begin(), pr.x.end());
  u_starts.push_back(*x_min - 2.0);
  u_starts.push_back(*x_max + 2.0);
  const std::vector<double> alpha_starts =
      law == Law::kPower ? std::vector<double>{0.5, 1.0} : std::vector<double>{0.0};
  double best_theta[kMaxParams] = {}, best_rss = kInf;
  int best_iterations = 0;
  for (double u0 : u_starts)
    for (double alpha0 : alpha_starts) {
      double theta[kMaxParams] = {0.0, u0, alpha0}, grad[kMaxParams], mean = 0.0;
      for (int k = 0; k < n; ++k)
        mean += pr.y[size_t(k)] - model(law, theta, pr.x[size_t(k)], grad);
      theta[0] = mean / n;
      double rss = kInf;
      const int it = levenberg_marquardt(pr, theta, &rss);
      if (rss < best_rss) {
        best_rss = rss;
        best_iterations = it;
        std::copy(theta, theta + p, best_theta);
      }
    }
  LawFit fit;
  fit.law = law;
  fit.dof = n - p;
  fit.iterations = best_iterations;
  fit.residuals.resize(size_t(n));
  double JtJ[kMaxParams][kMaxParams], Jtr[kMaxParams], cov[kMaxParams][kMaxParams];
  fit.rss = evaluate(pr, best_theta, &fit.residuals, JtJ, Jtr);
  fit.aic = n * std::log(std::max(fit.rss, 1e-300) / n) + 2.0 * p;
  fit.aicc = n - p - 1 > 0 ? fit.aic + 2.0 * p * (p + 1) / (n - p - 1) : kInf;
  double rhs[kMaxParams] = {};
  const bool invertible = solve(p, JtJ, rhs, cov);
  const double s2 = fit.dof > 0 ? fit.rss / fit.dof : kNaN;
  const double t = fit.dof > 0 ? student_t_quantile(0.5 + 0.5 * confidence, fit.dof) : kNaN;
  for (int i = 0; i < p; ++i) {
    const double se = invertible ? std::sqrt(s2 * cov[i][i]) : kNaN;
    const bool log_coord = i < 2;  // a = log eps, u = log B; alpha is linear
    auto natural = [&](double v) { return log_coord ? std::exp(v) : v; };
    fit.params.push_back(natural(best_theta[i]));
    fit.std_errors.push_back(se);
    fit.ci_low.push_back(natural(best_theta[i] - t * se));
    fit.ci_high.push_back(natural(best_theta[i] + t * se));
  }
  return fit;
}

LawComparison fit_laws(const std::vector<OptimalLr>& points, double confidence) {
  LawComparison c;
  c.fits.push_back(fit_law(Law::kSurge, points, confidence));
  c.fits.push_back(fit_law(Law::kSgd, points, confidence));
  if (points.size() >= 3) c.fits.push_back(fit_law(Law::kPower, points, confidence));
  const LawFit* by_rss = &c.fits[0];
  const LawFit* by_aic = &c.fits[0];
  const LawFit* by_aicc = &c.fits[0];
  for (const LawFit& f : c.fits) {
    if (f.rss < by_rss->rss) by_rss = &f;
    if (f.aic < by_aic->aic) by_aic = &f;
    if (f.aicc < by_aicc->aicc) by_aicc = &f;
  }
  c.best_by_rss = by_rss->law;
  c.best_by_aic = by_aic->law;
  c.best_by_aicc = by_aicc->law;
  return c;
}

std::string LawComparison::summary() const {
  std::string out;
  char buf[160];
  // "best AICc" only where some AICc is defined (it needs n > p + 1)
  bool aicc = false;
  for (const LawFit& f : fits) aicc = aicc || std::isfinite(f.aicc);
  for (const LawFit& f : fits) {
    const char* names[3] = {"eps_max", "B_noise", "alpha"};
    if (f.law == Law::kPower) names[0] = "eps", names[1] = "B_star";
    out += law_name(f.law) + ":";
    bool intervals = true;  // none where no degree of freedom is left or the fit is degenerate
    for (size_t i = 0; i < f.params.size(); ++i) {
      if (std::isfinite(f.ci_low[i]) && std::isfinite(f.ci_high[i]))
        std::snprintf(buf, sizeof buf, " %s %.4g [%.4g, %.4g]", names[i], f.params[i], f.ci_low[i],
                      f.ci_high[i]);
      else
        std::snprintf(buf, sizeof buf, " %s %.4g", names[i], f.params[i]), intervals = false;
      out += buf;
    }
    if (!intervals)
      out += f.residuals.size() <= f.params.size()
                 ? str(" (no intervals: ", f.residuals.size(), " batch sizes for ", f.params.size(),
                       " parameters)")
                 : std::string(" (no intervals: the fit is degenerate, at an edge of its range)");
    std::snprintf(buf, sizeof buf, "; RSS %.4g, AIC %.2f, AICc %.2f%s%s%s\n", f.rss, f.aic, f.aicc,
                  f.law == best_by_rss ? ", best RSS" : "",
                  f.law == best_by_aic ? ", best AIC" : "",
                  aicc && f.law == best_by_aicc ? ", best AICc" : "");
    out += buf;
  }
  return out;
}

TargetLossFit fit_steps_to_target(const std::vector<StepsToTarget>& pairs, double confidence) {
  const size_t n = pairs.size();
  if (n < 2)
    throw ConfigError(str("the steps-examples line (surge Eq. 22) has 2 parameters but ", n,
                          " (S, E) pairs were given; measure at least 2 batch sizes"));
  std::vector<double> x, y;
  for (const StepsToTarget& s : pairs) {
    if (!(s.steps > 0.0 && s.examples > 0.0))
      throw ConfigError(str("steps ", s.steps, " and examples ", s.examples, " must be positive"));
    x.push_back(1.0 / s.examples);
    y.push_back(1.0 / s.steps);
  }
  double mx = 0.0, my = 0.0;
  for (size_t k = 0; k < n; ++k) mx += x[k] / double(n), my += y[k] / double(n);
  double sxx = 0.0, sxy = 0.0;
  for (size_t k = 0; k < n; ++k) sxx += (x[k] - mx) * (x[k] - mx), sxy += (x[k] - mx) * (y[k] - my);
  if (!(sxx > 0.0)) throw ConfigError("all (S, E) pairs have the same E: the line is undefined");
  TargetLossFit f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  for (size_t k = 0; k < n; ++k) {
    f.residuals.push_back(y[k] - (f.intercept + f.slope * x[k]));
    f.rss += f.residuals.back() * f.residuals.back();
  }
  if (!(f.slope < 0.0 && f.intercept > 0.0))
    throw ConfigError(str("1/S = ", f.slope, " (1/E) + ", f.intercept,
                          ": surge Eq. 22 needs a "
                          "negative slope (-B_noise) and a positive intercept (1/S_min); the "
                          "points do not show the steps-examples trade-off"));
  f.b_noise = -f.slope;
  f.s_min = 1.0 / f.intercept;
  f.e_min = f.b_noise * f.s_min;
  const int dof = int(n) - 2;
  const double s2 = dof > 0 ? f.rss / dof : kNaN;
  f.slope_se = std::sqrt(s2 / sxx);
  f.intercept_se = std::sqrt(s2 * (1.0 / double(n) + mx * mx / sxx));
  const double t = dof > 0 ? student_t_quantile(0.5 + 0.5 * confidence, dof) : kNaN;
  f.b_noise_ci_low = f.b_noise - t * f.slope_se;
  f.b_noise_ci_high = f.b_noise + t * f.slope_se;
  return f;
}

double eps_max_surge(const std::vector<OptimalLr>& points, double b_noise) {
  check_points(points);
  if (points.empty() || !(b_noise > 0.0))
    throw ConfigError(str("eps_max (surge Eq. 23) needs points and B_noise > 0, got ",
                          points.size(), " points, B_noise ", b_noise));
  double sum = 0.0;
  for (const OptimalLr& pt : points)
    sum += pt.lr / 2.0 * (std::sqrt(b_noise / pt.batch) + std::sqrt(pt.batch / b_noise));
  return sum / double(points.size());
}

double eps_max_power(const std::vector<OptimalLr>& points, double b_noise, double alpha) {
  check_points(points);
  if (points.empty() || !(b_noise > 0.0))
    throw ConfigError(str("eps_max (surge Eq. 24) needs points and B_noise > 0, got ",
                          points.size(), " points, B_noise ", b_noise));
  double sum = 0.0;
  for (const OptimalLr& pt : points) sum += pt.lr * std::pow(1.0 + b_noise / pt.batch, alpha);
  return sum / double(points.size());
}

}  // namespace memo::scaling
