#include "memo/optim/lion.h"

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// Chen et al. 2023, Algorithm 2, in float64.
void check_lion(const LionOptions& o) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  Lion opt(layout, o, decay, cpu_backend());
  Params64 m = test::zeros_like(layout);
  auto reference = [&](int, double lr, Params64& p, const Params64& g) {
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        const double c = o.beta1 * m[i][j] + (1 - o.beta1) * g[i][j];
        const double wd = decay[i] ? o.weight_decay : 0.0;
        p[i][j] -= lr * (test::sign_of(c) + wd * p[i][j]);
        m[i][j] = o.beta2 * m[i][j] + (1 - o.beta2) * g[i][j];
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(Lion, update_matches_reference) {
  check_lion({.beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.5});
}

// Note [One minus beta]: beta1 = 1 - 1e-9 is 1.0f; the first step's c is then g * 1e-9, not 0.
TEST(Lion, beta_that_rounds_to_one_in_float_matches_reference) {
  check_lion({.beta1 = 1 - 1e-9, .beta2 = 0.99, .weight_decay = 0.5});
}

}  // namespace
}  // namespace memo
