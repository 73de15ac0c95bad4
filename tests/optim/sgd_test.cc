#include "memo/optim/sgd.h"

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

// torch.optim.SGD's published update, in float64.
void check_sgd(SgdOptions o) {
  ModelConfig config = test::tiny_config();
  ParamLayout layout(config);
  const std::vector<bool> decay = decay_matrices_only(layout);
  Sgd opt(layout, o, decay, cpu_backend());
  Params64 buf = test::zeros_like(layout);
  auto reference = [&](int t, double lr, Params64& p, const Params64& g) {
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t j = 0; j < p[i].size(); ++j) {
        double d = g[i][j] + (decay[i] ? o.weight_decay * p[i][j] : 0.0);
        if (o.momentum != 0.0) {
          buf[i][j] = t == 1 ? d : o.momentum * buf[i][j] + (1.0 - o.dampening) * d;
          d = o.nesterov ? d + o.momentum * buf[i][j] : buf[i][j];
        }
        p[i][j] -= lr * d;
      }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(Sgd, plain_sgd_with_weight_decay_matches_reference) {
  check_sgd({.momentum = 0.0, .dampening = 0.0, .nesterov = false, .weight_decay = 0.05});
}

TEST(Sgd, momentum_with_dampening_matches_reference) {
  check_sgd({.momentum = 0.9, .dampening = 0.1, .nesterov = false, .weight_decay = 0.05});
}

TEST(Sgd, nesterov_matches_reference) {
  check_sgd({.momentum = 0.9, .dampening = 0.0, .nesterov = true, .weight_decay = 0.05});
}

TEST(Sgd, nesterov_without_momentum_is_rejected) {
  ParamLayout layout(test::tiny_config());
  EXPECT_THROW(
      Sgd(layout, {.momentum = 0.0, .nesterov = true}, decay_matrices_only(layout), cpu_backend()),
      ConfigError);
}

}  // namespace
}  // namespace memo
