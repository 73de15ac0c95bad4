#include "memo/optim/adafactor.h"

#include <algorithm>
#include <cmath>

#include "memo/cpu/cpu_backend.h"
#include "optim/optim_test_util.h"

namespace memo {
namespace {

using test::Params64;

double rms(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v * v;
  return std::sqrt(s / double(x.size()));
}

// Shazeer & Stern 2018, Algorithms 4 (matrices) and 5 (vectors), written with the paper's row and
// column *sums* (V_hat = R C / 1^T R) where the implementation keeps means, in float64.
void check_adafactor(AdafactorOptions o) {
  ParamLayout layout(test::tiny_config());
  const std::vector<bool> decay = decay_matrices_only(layout);
  Adafactor opt(layout, o, decay, cpu_backend());
  Params64 row_sums, col_sums, v = test::zeros_like(layout), m = test::zeros_like(layout);
  for (const ParamInfo& info : layout.params()) {
    row_sums.emplace_back(info.is_matrix() ? size_t(info.shape[0]) : 0, 0.0);
    col_sums.emplace_back(info.is_matrix() ? size_t(info.shape[1]) : 0, 0.0);
  }
  auto reference = [&](int t, double lr, Params64& p, const Params64& g) {
    const double beta2 = 1.0 - std::pow(double(t), -o.decay_exponent);
    const double rho = std::min(1e-2, 1.0 / std::sqrt(double(t)));
    for (size_t i = 0; i < p.size(); ++i) {
      const ParamInfo& info = layout.params()[i];
      const double alpha = o.relative_step ? std::max(o.eps2, rms(p[i])) * rho : lr;
      std::vector<double> u(p[i].size());
      if (info.is_matrix()) {
        const size_t R = size_t(info.shape[0]), C = size_t(info.shape[1]);
        for (size_t r = 0; r < R; ++r) {
          double s = 0.0;
          for (size_t c = 0; c < C; ++c) s += g[i][r * C + c] * g[i][r * C + c] + o.eps1;
          row_sums[i][r] = beta2 * row_sums[i][r] + (1 - beta2) * s;
        }
        for (size_t c = 0; c < C; ++c) {
          double s = 0.0;
          for (size_t r = 0; r < R; ++r) s += g[i][r * C + c] * g[i][r * C + c] + o.eps1;
          col_sums[i][c] = beta2 * col_sums[i][c] + (1 - beta2) * s;
        }
        double total = 0.0;
        for (double x : row_sums[i]) total += x;
        for (size_t r = 0; r < R; ++r)
          for (size_t c = 0; c < C; ++c)
            u[r * C + c] = g[i][r * C + c] / std::sqrt(row_sums[i][r] * col_sums[i][c] / total);
      } else {
        for (size_t j = 0; j < u.size(); ++j) {
          v[i][j] = beta2 * v[i][j] + (1 - beta2) * (g[i][j] * g[i][j] + o.eps1);
          u[j] = g[i][j] / std::sqrt(v[i][j]);
        }
      }
      const double clip = std::max(1.0, rms(u) / o.clip_threshold);
      for (size_t j = 0; j < u.size(); ++j) {
        double update = alpha * u[j] / clip;
        if (o.beta1 > 0) {
          m[i][j] = o.beta1 * m[i][j] + (1 - o.beta1) * update;
          update = m[i][j];
        }
        const double wd = decay[i] ? o.weight_decay : 0.0;
        p[i][j] = p[i][j] - alpha * wd * p[i][j] - update;
      }
    }
  };
  test::run_against_reference(layout, opt, reference, test::kSteps, test::kAtol, test::kRtol);
}

TEST(Adafactor, relative_step_without_first_moment_matches_reference) {
  check_adafactor({.weight_decay = 0.1});
}

// d = 0.5 makes update clipping act on most tensors; beta1 adds the first moment.
TEST(Adafactor, given_lr_with_first_moment_and_clipping_matches_reference) {
  check_adafactor(
      {.beta1 = 0.9, .clip_threshold = 0.5, .relative_step = false, .weight_decay = 0.1});
}

TEST(Adafactor, matrices_keep_row_and_column_statistics_vectors_keep_full) {
  ParamLayout layout(test::tiny_config());
  Adafactor opt(layout, {}, decay_matrices_only(layout), cpu_backend());
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const StateTensor& s : opt.state()) {
    names.push_back(s.name);
    shapes.push_back(s.shape);
  }
  const ParamInfo& q = layout.find("model.layers.0.self_attn.k_proj.weight");  // [3, 6]
  const auto row = std::find(names.begin(), names.end(), "exp_avg_sq_row." + q.name);
  ASSERT_NE(row, names.end());
  EXPECT_EQ(shapes[size_t(row - names.begin())], std::vector<int64_t>{3});
  EXPECT_EQ(shapes[size_t(row - names.begin()) + 1], std::vector<int64_t>{6});
  EXPECT_EQ(names[size_t(row - names.begin()) + 1], "exp_avg_sq_col." + q.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "exp_avg_sq.model.norm.weight"), names.end());
  EXPECT_EQ(names.size(), 9u * 2 + 3);  // 9 matrices (row + column), 3 norm vectors, no beta1
}

}  // namespace
}  // namespace memo
