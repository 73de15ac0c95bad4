// Softmax cross-entropy: fp32 losses and gradients vs the float64 reference (including logits of
// magnitude 1e4 and a vocabulary of 50257), the reference gradient vs finite differences, aliasing
// of dlogits with logits, and bad targets rejected by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

struct CeCase {
  int64_t T, V;
  float spread;  // logits uniform in [-spread, spread)
};

// Losses and gradients from the kernel and the reference for one case; checks both.
void check_against_reference(const CeCase& k, float grad_scale, uint64_t seed) {
  const auto [T, V, spread] = k;
  const std::vector<float> logits = test::random_floats(T * V, seed, -spread, spread);
  const std::vector<int32_t> ys = test::random_ids(T, int32_t(V), seed + 1);
  std::vector<float> losses(T), dlogits(T * V);
  cross_entropy(Tensor(losses.data(), {T}), Tensor(dlogits.data(), {T, V}),
                ConstTensor(logits.data(), {T, V}), View<const int32_t>(ys.data(), {T}),
                grad_scale);
  const std::vector<double> ld = test::to_double(logits);
  std::vector<double> lossd(T), dld(T * V), loss_scale(T), grad_scale_v(T * V);
  cross_entropy_ref(TensorF64(lossd.data(), {T}), TensorF64(dld.data(), {T, V}),
                    ConstTensorF64(ld.data(), {T, V}), View<const int32_t>(ys.data(), {T}),
                    double(grad_scale));
  for (int64_t t = 0; t < T; ++t) loss_scale[t] = 1.0 + std::abs(lossd[t]);
  for (int64_t i = 0; i < T * V; ++i) {
    const double p = dld[i] / grad_scale + (i % V == ys[i / V] ? 1.0 : 0.0);  // softmax
    grad_scale_v[i] = std::abs(double(grad_scale)) * (p + 1.0 / 16.0);
  }
  // Loss: log(sum) carries the sum's relative error (exp_f32 <= 3 ulp per term; double sum) as
  // an absolute error, and the result is rounded once: <= 4u + u |loss|; 8u for margin.
  EXPECT_LE(test::max_scaled_err(losses, lossd, loss_scale), 8.0 * kFloatU) << T << "x" << V;
  // Gradient: exp (3 ulp), rounding of x - max (error u |x - max| p <= u / e absolute), the scale
  // and the product: <= ~6u p + u / e. Scaling by p + 1/16 bounds both parts by 16u; the target
  // entry p - 1 adds one rounding of |grad_scale|, inside the same 1/16 term.
  EXPECT_LE(test::max_scaled_err(dlogits, dld, grad_scale_v), 16.0 * kFloatU) << T << "x" << V;
}

TEST(CrossEntropy, matches_float64_reference_on_awkward_shapes) {
  for (auto [T, V] : test::awkward_shapes()) check_against_reference({T, V, 8.0f}, 1.0f, 50);
}

TEST(CrossEntropy, matches_float64_reference_for_large_logits_and_vocabulary) {
  check_against_reference({3, 50257, 10.0f}, 1.0f / 3.0f, 51);  // GPT-2 vocabulary
  check_against_reference({5, 97, 1e4f}, 0.25f, 52);            // exp(1e4) would overflow
  check_against_reference({4, 13, 1e-6f}, 1.0f, 53);            // nearly uniform softmax
}

TEST(CrossEntropy, reference_gradient_matches_finite_differences) {
  const int64_t T = 3, V = 7;
  const double grad_scale = 0.5;
  const std::vector<int32_t> ys = {6, 0, 3};
  const std::vector<double> logits0 = test::to_double(test::random_floats(T * V, 54, -3.f, 3.f));
  auto loss = [&](const std::vector<double>& logits) {  // grad_scale * sum_t losses[t]
    std::vector<double> losses(T);
    cross_entropy_ref(TensorF64(losses.data(), {T}), TensorF64(),
                      ConstTensorF64(logits.data(), {T, V}), View<const int32_t>(ys.data(), {T}),
                      grad_scale);
    return grad_scale * (losses[0] + losses[1] + losses[2]);
  };
  std::vector<double> losses(T), dlogits(T * V);
  cross_entropy_ref(TensorF64(losses.data(), {T}), TensorF64(dlogits.data(), {T, V}),
                    ConstTensorF64(logits0.data(), {T, V}), View<const int32_t>(ys.data(), {T}),
                    grad_scale);
  // Finite differences are good to ~1e-9 here (see finite_diff_grad); 1e-7 fails any wrong term.
  EXPECT_LE(test::max_grad_err(dlogits, test::finite_diff_grad(logits0, loss)), 1e-7);
}

TEST(CrossEntropy, gradient_may_overwrite_logits_in_place_and_loss_only_leaves_it_alone) {
  const int64_t T = 9, V = 131;
  const std::vector<float> logits = test::random_floats(T * V, 55, -5.f, 5.f);
  const std::vector<int32_t> ys = test::random_ids(T, int32_t(V), 56);
  std::vector<float> losses(T), dlogits(T * V), losses_only(T);
  cross_entropy(Tensor(losses.data(), {T}), Tensor(dlogits.data(), {T, V}),
                ConstTensor(logits.data(), {T, V}), View<const int32_t>(ys.data(), {T}), 1.0f);
  cross_entropy(Tensor(losses_only.data(), {T}), Tensor(), ConstTensor(logits.data(), {T, V}),
                View<const int32_t>(ys.data(), {T}), 1.0f);
  std::vector<float> inplace = logits, losses_inplace(T);
  cross_entropy(Tensor(losses_inplace.data(), {T}), Tensor(inplace.data(), {T, V}),
                ConstTensor(inplace.data(), {T, V}), View<const int32_t>(ys.data(), {T}), 1.0f);
  EXPECT_EQ(inplace, dlogits);
  EXPECT_EQ(losses_inplace, losses);
  EXPECT_EQ(losses_only, losses);
}

TEST(CrossEntropy, gives_the_same_bits_on_one_and_two_threads) {
  const int64_t T = 64, V = 1000;
  const std::vector<float> logits = test::random_floats(T * V, 57, -5.f, 5.f);
  const std::vector<int32_t> ys = test::random_ids(T, int32_t(V), 58);
  auto run = [&](int threads) {
    std::vector<float> out(T + T * V);
    test::with_threads(threads, [&] {
      cross_entropy(Tensor(out.data(), {T}), Tensor(out.data() + T, {T, V}),
                    ConstTensor(logits.data(), {T, V}), View<const int32_t>(ys.data(), {T}), 0.5f);
    });
    return out;
  };
  EXPECT_EQ(run(1), run(2));
}

// kIgnoredTarget (a target the loss does not count): loss 0 and a zero gradient row, in place
// too, while every other row keeps the bits it has without ignored rows; the same through the
// vocabulary-parallel pair, on a rank whose part holds the ignored rows' columns or not.
TEST(CrossEntropy, ignored_targets_give_zero_rows_and_leave_the_others_bits) {
  const int64_t T = 9, V = 131;
  const std::vector<float> logits = test::random_floats(T * V, 59, -5.f, 5.f);
  const std::vector<int32_t> ys = test::random_ids(T, int32_t(V), 60);
  std::vector<int32_t> masked = ys;
  masked[0] = masked[4] = masked[8] = kIgnoredTarget;
  auto run = [&](const std::vector<int32_t>& targets, bool in_place) {
    std::vector<float> losses(T, -1.0f), d = in_place ? logits : std::vector<float>(T * V, -1.0f);
    cross_entropy(Tensor(losses.data(), {T}), Tensor(d.data(), {T, V}),
                  ConstTensor(in_place ? d.data() : logits.data(), {T, V}),
                  View<const int32_t>(targets.data(), {T}), 0.25f);
    return std::make_pair(losses, d);
  };
  const auto [want_l, want_d] = run(ys, false);
  for (bool in_place : {false, true}) {
    const auto [l, d] = run(masked, in_place);
    for (int64_t t = 0; t < T; ++t) {
      const bool ignored = masked[t] == kIgnoredTarget;
      EXPECT_EQ(l[t], ignored ? 0.0f : want_l[t]) << t;
      for (int64_t c = 0; c < V; ++c)
        ASSERT_EQ(d[t * V + c], ignored ? 0.0f : want_d[t * V + c]) << t << " " << c;
    }
  }
  // two ranks of 65 and 66 columns
  std::vector<float> stats(4 * T), target(T, 0.0f);
  const int64_t split[3] = {0, 65, V};
  std::vector<std::vector<int32_t>> local(2, std::vector<int32_t>(T));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t t = 0; t < T; ++t)
      local[r][t] = masked[t] == kIgnoredTarget ? kIgnoredTarget
                    : masked[t] >= split[r] && masked[t] < split[r + 1]
                        ? int32_t(masked[t] - split[r])
                        : kOtherShard;
    std::vector<float> tl(T);
    const ConstTensor part = ConstTensor(logits.data(), {T, V}).slice_cols(split[r], split[r + 1]);
    vocab_parallel_ce_stats(Tensor(stats.data() + 2 * r * T, {2, T}), Tensor(tl.data(), {T}), part,
                            View<const int32_t>(local[r].data(), {T}));
    for (int64_t t = 0; t < T; ++t) target[t] += tl[t];
  }
  for (int64_t r = 0; r < 2; ++r) {
    const int64_t Vl = split[r + 1] - split[r];
    std::vector<float> l(T, -1.0f), d(T * Vl, -1.0f);
    vocab_parallel_ce(Tensor(l.data(), {T}), Tensor(d.data(), {T, Vl}),
                      ConstTensor(logits.data(), {T, V}).slice_cols(split[r], split[r + 1]),
                      View<const int32_t>(local[r].data(), {T}), ConstTensor(stats.data(), {4, T}),
                      ConstTensor(target.data(), {T}), 0.25f);
    for (int64_t t = 0; t < T; ++t) {
      if (masked[t] != kIgnoredTarget) {
        EXPECT_NEAR(l[t], want_l[t], 4.0 * kFloatU * (1.0 + std::abs(want_l[t])));
        continue;
      }
      EXPECT_EQ(l[t], 0.0f) << r << " " << t;
      for (int64_t c = 0; c < Vl; ++c) ASSERT_EQ(d[t * Vl + c], 0.0f) << r << " " << t;
    }
  }
}

TEST(CrossEntropy, bad_target_error_names_position_value_and_vocabulary) {
  const int64_t T = 3, V = 5;
  std::vector<float> logits(T * V), losses(T);
  for (int32_t bad : {5, -1, -3}) {  // -2 is kIgnoredTarget
    const std::vector<int32_t> ys = {0, bad, 1};
    try {
      cross_entropy(Tensor(losses.data(), {T}), Tensor(), ConstTensor(logits.data(), {T, V}),
                    View<const int32_t>(ys.data(), {T}), 1.0f);
      FAIL() << "no DataError for target " << bad;
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("target id " + std::to_string(bad) + " at position 1"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("[0, 5)"), std::string::npos) << msg;
    }
  }
}

// The loss over a vocabulary split into t parts (one per tensor-parallel rank) equals the loss
// over the whole: each part's max and sum, merged in double, give the whole's log-sum-exp to a
// few ulps, and each part's gradient is the whole's columns.
TEST(VocabParallelCrossEntropy, parts_give_the_whole_vocabularys_loss_and_gradient) {
  constexpr float kGradScale = 0.25f;
  for (const CeCase& k : {CeCase{7, 96, 8.0f}, CeCase{5, 60, 30.0f}, CeCase{3, 12, 2.0f}}) {
    const auto [T, V, spread] = k;
    const std::vector<float> logits = test::random_floats(T * V, 81, -spread, spread);
    const std::vector<int32_t> ys = test::random_ids(T, int32_t(V), 82);
    std::vector<float> want_loss(T), want_grad(T * V);
    cross_entropy(Tensor(want_loss.data(), {T}), Tensor(want_grad.data(), {T, V}),
                  ConstTensor(logits.data(), {T, V}), View<const int32_t>(ys.data(), {T}),
                  kGradScale);
    for (int64_t t_ranks : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(T) + "x" + std::to_string(V) + " over " +
                   std::to_string(t_ranks));
      const int64_t Vl = V / t_ranks;
      std::vector<float> stats(2 * t_ranks * T), target(T, 0.0f);
      std::vector<std::vector<int32_t>> local(static_cast<size_t>(t_ranks),
                                              std::vector<int32_t>(T));
      for (int64_t r = 0; r < t_ranks; ++r) {  // each rank's part: columns [r Vl, (r + 1) Vl)
        for (int64_t t = 0; t < T; ++t)
          local[r][t] = ys[t] / Vl == r ? int32_t(ys[t] - r * Vl) : kOtherShard;
        std::vector<float> tl(T);
        vocab_parallel_ce_stats(Tensor(stats.data() + 2 * r * T, {2, T}), Tensor(tl.data(), {T}),
                                ConstTensor(logits.data(), {T, V}).slice_cols(r * Vl, (r + 1) * Vl),
                                View<const int32_t>(local[r].data(), {T}));
        for (int64_t t = 0; t < T; ++t) target[t] += tl[t];
      }
      for (int64_t r = 0; r < t_ranks; ++r) {
        std::vector<float> loss(T), grad(T * Vl);
        vocab_parallel_ce(Tensor(loss.data(), {T}), Tensor(grad.data(), {T, Vl}),
                          ConstTensor(logits.data(), {T, V}).slice_cols(r * Vl, (r + 1) * Vl),
                          View<const int32_t>(local[r].data(), {T}),
                          ConstTensor(stats.data(), {2 * t_ranks, T}),
                          ConstTensor(target.data(), {T}), kGradScale);
        for (int64_t t = 0; t < T; ++t) {
          EXPECT_NEAR(loss[t], want_loss[t], 4.0 * kFloatU * (1.0 + std::abs(want_loss[t])));
          for (int64_t c = 0; c < Vl; ++c)
            EXPECT_NEAR(grad[t * Vl + c], want_grad[t * V + r * Vl + c],
                        8.0 * kFloatU * (std::abs(want_grad[t * V + r * Vl + c]) + kGradScale));
        }
      }
    }
  }
}

}  // namespace
}  // namespace memo::cpu
