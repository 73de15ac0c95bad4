#include "memo/optim/adam.h"

#include <cmath>
#include <limits>

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// Kingma & Ba 2015, Algorithm 1, with torch's eps placement and L2 weight decay in the gradient.
TEST(Adam, l2_weight_decay_matches_reference) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  const AdamOptions o{.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05};
  Adam opt(layout, o, decay, cpu_backend());
  Params64 m = test::zeros_like(layout), v = test::zeros_like(layout);
  auto reference = [&](int t, double lr, Params64& p, const Params64& g) {
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        const double d = g[i][j] + (decay[i] ? o.weight_decay * p[i][j] : 0.0);
        m[i][j] = o.beta1 * m[i][j] + (1 - o.beta1) * d;
        v[i][j] = o.beta2 * v[i][j] + (1 - o.beta2) * d * d;
        const double m_hat = m[i][j] / (1 - std::pow(o.beta1, t));
        const double v_hat = v[i][j] / (1 - std::pow(o.beta2, t));
        p[i][j] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(Adam, beta_out_of_range_is_rejected_with_the_value) {
  ParamLayout layout(test::tiny_config());
  try {
    Adam(layout, {.beta1 = 1.0}, decay_matrices_only(layout), cpu_backend());
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("beta1 = 1 is outside [0, 1)"), std::string::npos)
        << e.what();
  }
  // ranges of finite numbers: an infinite eps or decay is refused, not run without updates
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(Adam(layout, {.eps = inf}, decay_matrices_only(layout), cpu_backend()), ConfigError);
  EXPECT_THROW(Adam(layout, {.weight_decay = inf}, decay_matrices_only(layout), cpu_backend()),
               ConfigError);
}

}  // namespace
}  // namespace memo
