#include "memo/optim/adamw.h"

#include <cmath>

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// Loshchilov & Hutter 2019 (Algorithm 2) in torch's order: decay first, scaled by lr. Betas near 1
// too (Note [One minus beta]): 1 - 1e-9 rounds to 1.0f, so 1.0f - float(beta) would be 0.
void check_adamw(const AdamWOptions& o) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  AdamW opt(layout, o, decay, cpu_backend());
  Params64 m = test::zeros_like(layout), v = test::zeros_like(layout);
  auto reference = [&](int t, double lr, Params64& p, const Params64& g) {
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        if (decay[i]) p[i][j] -= lr * o.weight_decay * p[i][j];
        m[i][j] = o.beta1 * m[i][j] + (1 - o.beta1) * g[i][j];
        v[i][j] = o.beta2 * v[i][j] + (1 - o.beta2) * g[i][j] * g[i][j];
        const double m_hat = m[i][j] / (1 - std::pow(o.beta1, t));
        const double v_hat = v[i][j] / (1 - std::pow(o.beta2, t));
        p[i][j] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(AdamW, decoupled_weight_decay_matches_reference) {
  check_adamw({.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
}

TEST(AdamW, betas_that_round_to_one_in_float_match_reference) {
  check_adamw({.beta1 = 0.9, .beta2 = 1 - 1e-9, .eps = 1e-8, .weight_decay = 0.1});
  check_adamw({.beta1 = 1 - 1e-9, .beta2 = 0.9999999, .eps = 1e-8, .weight_decay = 0.1});
}

TEST(AdamW, norms_are_not_decayed_by_default_mask) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  for (size_t i = 0; i < decay.size(); ++i)
    EXPECT_EQ(decay[i], layout.params()[i].is_matrix()) << layout.params()[i].name;
}

}  // namespace
}  // namespace memo
