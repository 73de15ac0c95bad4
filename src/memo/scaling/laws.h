// Learning-rate laws in batch size (DESIGN.md section 3; the surge paper, arXiv 2405.14578): the
// closed-form laws a sweep is fitted to, and the exact optima
// of the Gaussian gradient model they approximate. Batch sizes and B_noise share one unit
// (tokens for language models, examples otherwise). Pure functions, no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memo::scaling {

// eps_opt(B) = eps_max / (0.5 (sqrt(B_noise/B) + sqrt(B/B_noise))): sign-like optimisers (Adam
// family), surge paper Eq. 2 / Eq. 13. Rises as sqrt(B), peaks at B = B_noise (Eq. 15), falls.
double lr_surge(double batch, double eps_max, double b_noise);
// eps_opt(B) = eps_max / (1 + B_noise/B): SGD, surge Eq. 1 = McCandlish et al. 2018 Eq. 2.6.
double lr_sgd(double batch, double eps_max, double b_noise);
// eps_opt(B) = eps / (1 + B_star/B)^alpha: McCandlish's Eq. A.3 (alpha = 1 is the SGD law,
// 0.5..1 was proposed for Adam); monotone for alpha > 0, so it cannot show a surge (Eq. 12).
double lr_power(double batch, double eps, double b_star, double alpha);

enum class Law { kSurge, kSgd, kPower };
std::string law_name(Law law);  // "surge", "sgd", "power"
// Parameters in order: kSurge and kSgd {eps_max, b_noise}; kPower {eps, b_star, alpha}.
int law_param_count(Law law);
double law_lr(Law law, const std::vector<double>& params, double batch);
// The batch size that maximises the law's learning rate: B_noise for the surge law; none for the
// SGD and power laws, which rise monotonically towards their eps_max.
std::optional<double> law_peak_batch(Law law, const std::vector<double>& params);

// The Gaussian model of surge Section 3 / App. B: per-example gradient coordinate i ~ N(mu_i,
// sigma_i^2), coordinates independent, so a batch-B gradient has cov diag(sigma^2)/B.
struct GaussianModel {
  std::vector<double> mu;       // [n] true gradient G
  std::vector<double> sigma;    // [n] per-example gradient std per coordinate
  std::vector<double> hessian;  // [n * n] row-major, symmetric
  int64_t size() const { return int64_t(mu.size()); }
};

// Throws ConfigError unless sizes agree, sigma > 0 and the Hessian is symmetric.
void check_model(const GaussianModel& model);

// Exact optimum for sign descent V = sign(G_est), surge Theorem 2, Eq. 9:
//   E_i = erf(sqrt(B/2) mu_i/sigma_i),
//   eps_opt = sum_i E_i mu_i / (sum_i (1 - E_i^2) H_ii + sum_ij E_i E_j H_ij).
double lr_sign_exact(const GaussianModel& model, double batch);
// Exact optimum for SGD V = G_est (Lemma 1, Eq. 6): |G|^2 / (tr(H Sigma)/B + G^T H G).
double lr_sgd_exact(const GaussianModel& model, double batch);
// The argmax over [batch_lo, batch_hi] of lr_sign_exact (golden-section search in log B).
double sign_peak_batch_exact(const GaussianModel& model, double batch_lo, double batch_hi);
// The large-batch plateau of Eq. 9 (Theorem 4, Eq. 17): sum |mu_i| / sign(mu)^T H sign(mu).
double lr_sign_large_batch(const GaussianModel& model);

struct LawParams {
  double eps_max = 0.0;
  double b_noise = 0.0;
};
// Surge Theorem 3: B_noise = pi tr(H) / (2 sum_{i!=j} s_i s_j H_ij) (Eq. 14) and eps_max (Eq. 16,
// App. D form), s_i = mu_i/sigma_i. Throws ConfigError when sum_{i!=j} s_i s_j H_ij <= 0: then
// the sign optimum has no peak (it rises monotonically), e.g. for every diagonal Hessian.
LawParams surge_params(const GaussianModel& model);
// McCandlish Eq. 2.6-2.8: eps_max = |G|^2 / G^T H G, B_noise = tr(H Sigma) / G^T H G.
LawParams sgd_params(const GaussianModel& model);

}  // namespace memo::scaling
