#include "memo/scaling/laws.h"

#include <cmath>

#include "memo/core/error.h"

namespace memo::scaling {

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_batch(double batch) {
  if (!(batch > 0.0 && std::isfinite(batch)))
    throw ConfigError(str("batch size ", batch, " must be positive and finite"));
}

void check_params(Law law, const std::vector<double>& p) {
  if (int(p.size()) != law_param_count(law))
    throw ConfigError(
        str(law_name(law), " law takes ", law_param_count(law), " parameters, got ", p.size()));
}

double quad_form(const GaussianModel& m, const std::vector<double>& x) {  // x^T H x
  const int64_t n = m.size();
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      sum += x[size_t(i)] * m.hessian[size_t(i * n + j)] * x[size_t(j)];
  return sum;
}

}  // namespace

double lr_surge(double batch, double eps_max, double b_noise) {
  check_batch(batch);
  return eps_max / (0.5 * (std::sqrt(b_noise / batch) + std::sqrt(batch / b_noise)));
}

double lr_sgd(double batch, double eps_max, double b_noise) {
  check_batch(batch);
  return eps_max / (1.0 + b_noise / batch);
}

double lr_power(double batch, double eps, double b_star, double alpha) {
  check_batch(batch);
  return eps / std::pow(1.0 + b_star / batch, alpha);
}

std::string law_name(Law law) {
  switch (law) {
    case Law::kSurge:
      return "surge";
    case Law::kSgd:
      return "sgd";
    case Law::kPower:
      return "power";
  }
  return "?";
}

int law_param_count(Law law) { return law == Law::kPower ? 3 : 2; }

double law_lr(Law law, const std::vector<double>& p, double batch) {
  check_params(law, p);
  switch (law) {
    case Law::kSurge:
      return lr_surge(batch, p[0], p[1]);
    case Law::kSgd:
      return lr_sgd(batch, p[0], p[1]);
    case Law::kPower:
      return lr_power(batch, p[0], p[1], p[2]);
  }
  return 0.0;
}

std::optional<double> law_peak_batch(Law law, const std::vector<double>& p) {
  check_params(law, p);
  if (law == Law::kSurge) return p[1];
  return std::nullopt;
}

void check_model(const GaussianModel& m) {
  const int64_t n = m.size();
  if (n == 0 || int64_t(m.sigma.size()) != n || int64_t(m.hessian.size()) != n * n)
    throw ConfigError(str("Gaussian model sizes disagree: mu ", m.mu.size(), ", sigma ",
                          m.sigma.size(), ", hessian ", m.hessian.size(), " (want n, n, n*n)"));
  for (int64_t i = 0; i < n; ++i) {
    if (!(m.sigma[size_t(i)] > 0.0))
      throw ConfigError(
          str("Gaussian model sigma[", i, "] = ", m.sigma[size_t(i)], " must be > 0"));
    for (int64_t j = 0; j < i; ++j)
      if (m.hessian[size_t(i * n + j)] != m.hessian[size_t(j * n + i)])
        throw ConfigError(str("Gaussian model Hessian is not symmetric at (", i, ", ", j, ")"));
  }
}

double lr_sign_exact(const GaussianModel& m, double batch) {
  check_batch(batch);
  const int64_t n = m.size();
  std::vector<double> e(m.mu.size());
  double num = 0.0, diag = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = size_t(i);
    e[k] = std::erf(std::sqrt(batch / 2.0) * m.mu[k] / m.sigma[k]);  // E[sign(G_est,i)], Eq. 35
    num += e[k] * m.mu[k];
    diag += (1.0 - e[k] * e[k]) * m.hessian[size_t(i * n + i)];  // tr(H cov(V)), var = 1 - E^2
  }
  return num / (diag + quad_form(m, e));
}

double lr_sgd_exact(const GaussianModel& m, double batch) {
  check_batch(batch);
  const int64_t n = m.size();
  double g2 = 0.0, tr_h_sigma = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    g2 += m.mu[size_t(i)] * m.mu[size_t(i)];
    tr_h_sigma += m.hessian[size_t(i * n + i)] * m.sigma[size_t(i)] * m.sigma[size_t(i)];
  }
  return g2 / (tr_h_sigma / batch + quad_form(m, m.mu));
}

double sign_peak_batch_exact(const GaussianModel& m, double batch_lo, double batch_hi) {
  check_batch(batch_lo);
  check_batch(batch_hi);
  const double kInvPhi = (std::sqrt(5.0) - 1.0) / 2.0;
  double a = std::log(batch_lo), b = std::log(batch_hi);
  double c = b - kInvPhi * (b - a), d = a + kInvPhi * (b - a);
  double fc = lr_sign_exact(m, std::exp(c)), fd = lr_sign_exact(m, std::exp(d));
  while (b - a > 1e-9) {
    if (fc > fd) {
      b = d, d = c, fd = fc;
      c = b - kInvPhi * (b - a);
      fc = lr_sign_exact(m, std::exp(c));
    } else {
      a = c, c = d, fc = fd;
      d = a + kInvPhi * (b - a);
      fd = lr_sign_exact(m, std::exp(d));
    }
  }
  return std::exp(0.5 * (a + b));
}

double lr_sign_large_batch(const GaussianModel& m) {
  std::vector<double> s(m.mu.size());
  double num = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = double((m.mu[i] > 0.0) - (m.mu[i] < 0.0));
    num += std::abs(m.mu[i]);
  }
  return num / quad_form(m, s);
}

LawParams surge_params(const GaussianModel& m) {
  const int64_t n = m.size();
  std::vector<double> s(m.mu.size());
  double tr_h = 0.0, diag_s = 0.0, weighted = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = size_t(i);
    s[k] = m.mu[k] / m.sigma[k];
    const double h_ii = m.hessian[size_t(i * n + i)];
    tr_h += h_ii;
    diag_s += s[k] * s[k] * h_ii;
    weighted += m.mu[k] * m.mu[k] / m.sigma[k];
  }
  const double off = quad_form(m, s) - diag_s;  // sum_{i != j} s_i s_j H_ij
  if (!(off > 0.0))
    throw ConfigError(str("sum_{i!=j} s_i s_j H_ij = ", off,
                          " is not positive: the sign-descent "
                          "optimum has no peak (surge Eq. 14 needs off-diagonal curvature along "
                          "the signal)"));
  return {weighted / (2.0 * std::sqrt(tr_h * off)), kPi * tr_h / (2.0 * off)};
}

LawParams sgd_params(const GaussianModel& m) {
  const int64_t n = m.size();
  double g2 = 0.0, tr_h_sigma = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    g2 += m.mu[size_t(i)] * m.mu[size_t(i)];
    tr_h_sigma += m.hessian[size_t(i * n + i)] * m.sigma[size_t(i)] * m.sigma[size_t(i)];
  }
  const double ghg = quad_form(m, m.mu);
  return {g2 / ghg, tr_h_sigma / ghg};
}

}  // namespace memo::scaling
