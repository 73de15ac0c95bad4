#include "memo/optim/adagrad.h"

#include <cmath>

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// Duchi et al. 2011 diagonal Adagrad as torch.optim.Adagrad, in float64.
TEST(Adagrad, accumulator_and_lr_decay_match_reference) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  const AdagradOptions o{
      .lr_decay = 0.05, .initial_accumulator_value = 0.1, .eps = 1e-10, .weight_decay = 0.05};
  Adagrad opt(layout, o, decay, cpu_backend());
  Params64 s = test::zeros_like(layout);
  for (auto& t : s)
    for (double& x : t) x = o.initial_accumulator_value;
  auto reference = [&](int t, double lr, Params64& p, const Params64& g) {
    const double clr = lr / (1 + (t - 1) * o.lr_decay);
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        const double d = g[i][j] + (decay[i] ? o.weight_decay * p[i][j] : 0.0);
        s[i][j] += d * d;
        p[i][j] -= clr * d / (std::sqrt(s[i][j]) + o.eps);
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

}  // namespace
}  // namespace memo
