#include "memo/optim/rmsprop.h"

#include <cmath>

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// Tieleman & Hinton 2012 (Graves 2013 for the centered form) as torch.optim.RMSprop, in float64.
void check_rmsprop(RmspropOptions o) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  Rmsprop opt(layout, o, decay, cpu_backend());
  Params64 v = test::zeros_like(layout), a = test::zeros_like(layout);
  Params64 buf = test::zeros_like(layout);
  auto reference = [&](int, double lr, Params64& p, const Params64& g) {
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        const double d = g[i][j] + (decay[i] ? o.weight_decay * p[i][j] : 0.0);
        v[i][j] = o.alpha * v[i][j] + (1 - o.alpha) * d * d;
        a[i][j] = o.alpha * a[i][j] + (1 - o.alpha) * d;
        const double var = o.centered ? v[i][j] - a[i][j] * a[i][j] : v[i][j];
        const double den = std::sqrt(var) + o.eps;
        buf[i][j] = o.momentum * buf[i][j] + d / den;
        p[i][j] -= lr * (o.momentum > 0 ? buf[i][j] : d / den);
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(Rmsprop, plain_matches_reference) {
  check_rmsprop(
      {.alpha = 0.99, .eps = 1e-8, .momentum = 0.0, .centered = false, .weight_decay = 0.05});
}

// Centered with alpha 0.9: v - a^2 stays well above zero, so float32 cancellation is mild.
TEST(Rmsprop, centered_with_momentum_matches_reference) {
  check_rmsprop(
      {.alpha = 0.9, .eps = 1e-8, .momentum = 0.8, .centered = true, .weight_decay = 0.05});
}

TEST(Rmsprop, state_lists_only_the_buffers_in_use) {
  ParamLayout layout(test::tiny_config());
  Rmsprop plain(layout, {}, decay_matrices_only(layout), cpu_backend());
  Rmsprop full(layout, {.momentum = 0.5, .centered = true}, decay_matrices_only(layout),
               cpu_backend());
  EXPECT_EQ(plain.state().size(), layout.params().size());
  EXPECT_EQ(full.state().size(), 3 * layout.params().size());
}

}  // namespace
}  // namespace memo
