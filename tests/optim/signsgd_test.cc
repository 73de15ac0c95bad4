#include "memo/optim/signsgd.h"

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// signSGD / Signum (Bernstein et al. 2018) with decoupled weight decay, in float64.
void check_signsgd(SignSgdOptions o) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  SignSgd opt(layout, o, decay, cpu_backend());
  Params64 m = test::zeros_like(layout);
  auto reference = [&](int, double lr, Params64& p, const Params64& g) {
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        m[i][j] = o.momentum * m[i][j] + (1.0 - o.momentum) * g[i][j];
        const double wd = decay[i] ? o.weight_decay : 0.0;
        p[i][j] = p[i][j] - lr * wd * p[i][j] - lr * test::sign_of(m[i][j]);
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(SignSgd, sign_descent_matches_reference) {
  check_signsgd({.momentum = 0.0, .weight_decay = 0.1});
}

TEST(SignSgd, signum_matches_reference) { check_signsgd({.momentum = 0.9, .weight_decay = 0.1}); }

TEST(SignSgd, zero_gradient_gives_no_step) {
  ParamLayout layout(test::tiny_config());
  SignSgd opt(layout, {}, std::vector<bool>(layout.params().size(), false), cpu_backend());
  AlignedBuffer<float> p(layout.total_numel()), g(layout.total_numel());
  p[0] = 0.5f;
  opt.step(p.view(), g.view(), 0.1);
  EXPECT_EQ(p[0], 0.5f);  // sign(0) = 0, as torch.sign
}

}  // namespace
}  // namespace memo
