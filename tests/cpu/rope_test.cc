// RoPE: the fp32 table and rotation vs the float64 reference, the reference backward vs finite
// differences, and the backward undoing the forward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/backend/backend.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

constexpr float kTheta = 10000.0f;

struct RopeShape {
  int64_t T, S, n_heads, D;
};
// T a multiple of S (several sequences) or not, one head or several, D = 2 and D not a power of 2.
const std::vector<RopeShape> kShapes = {{1, 1, 1, 2},    {7, 7, 3, 6},    {13, 5, 2, 10},
                                        {26, 13, 4, 64}, {97, 97, 1, 34}, {40, 20, 8, 64}};

TEST(RopeTable, matches_float64_reference_to_one_rounding) {
  for (int64_t D : {2, 6, 64, 128}) {
    const int64_t S = 300;
    std::vector<float> cos(S * D / 2), sin(S * D / 2);
    rope_table(Tensor(cos.data(), {S, D / 2}), Tensor(sin.data(), {S, D / 2}),
               rope_inv_freq(D, kTheta), 1.0, 0);
    std::vector<double> cd(S * D / 2), sd(S * D / 2);
    rope_table_ref(TensorF64(cd.data(), {S, D / 2}), TensorF64(sd.data(), {S, D / 2}), D,
                   double(kTheta));
    // Both compute in double; the kernel rounds once to float: <= u relative, and u absolute for
    // values near zero (|cos|, |sin| <= 1).
    EXPECT_LE(test::max_rel_err(cos, cd, 1.0), kFloatU) << D;
    EXPECT_LE(test::max_rel_err(sin, sd, 1.0), kFloatU) << D;
  }
}

TEST(RopeForward, matches_float64_reference_and_backward_matches_its_reference) {
  for (auto [T, S, H, D] : kShapes) {
    std::vector<float> cos(S * D / 2), sin(S * D / 2);
    rope_table(Tensor(cos.data(), {S, D / 2}), Tensor(sin.data(), {S, D / 2}),
               rope_inv_freq(D, kTheta), 1.0, 0);
    const std::vector<double> cd = test::to_double(cos), sd = test::to_double(sin);
    ConstTensor cv(cos.data(), {S, D / 2}), sv(sin.data(), {S, D / 2});
    ConstTensorF64 cdv(cd.data(), {S, D / 2}), sdv(sd.data(), {S, D / 2});
    const std::vector<float> x0 = test::random_floats(T * H * D, 20);
    // (x1 cos - x2 sin): two products and a sum, each <= u of |x1 cos| + |x2 sin| <= |x1| + |x2|;
    // scale by the row's max |x| so the bound holds element-wise.
    for (bool backward : {false, true}) {
      std::vector<float> x = x0;
      std::vector<double> xd = test::to_double(x0);
      if (backward) {
        rope_backward(Tensor(x.data(), {T, H * D}), cv, sv, D);
        rope_backward_ref(TensorF64(xd.data(), {T, H * D}), cdv, sdv, D);
      } else {
        rope_forward(Tensor(x.data(), {T, H * D}), cv, sv, D);
        rope_forward_ref(TensorF64(xd.data(), {T, H * D}), cdv, sdv, D);
      }
      const std::vector<double> scale(x.size(), 2.0);  // |x1| + |x2| < 2 for x in [-1, 1)
      EXPECT_LE(test::max_scaled_err(x, xd, scale), 3.0 * kFloatU)
          << T << " " << S << " " << H << " " << D << " backward " << backward;
    }
  }
}

TEST(RopeBackward, reference_is_the_transpose_of_forward_by_finite_differences) {
  const int64_t T = 5, S = 3, H = 2, D = 6;
  std::vector<double> cos(S * D / 2), sin(S * D / 2);
  rope_table_ref(TensorF64(cos.data(), {S, D / 2}), TensorF64(sin.data(), {S, D / 2}), D, 100.0);
  ConstTensorF64 cv(cos.data(), {S, D / 2}), sv(sin.data(), {S, D / 2});
  const std::vector<double> x0 = test::to_double(test::random_floats(T * H * D, 21)),
                            probe = test::to_double(test::random_floats(T * H * D, 22));
  auto loss = [&](std::vector<double> x) {  // L = sum rope(x) * probe
    rope_forward_ref(TensorF64(x.data(), {T, H * D}), cv, sv, D);
    return test::dot(x, probe);
  };
  std::vector<double> dx = probe;
  rope_backward_ref(TensorF64(dx.data(), {T, H * D}), cv, sv, D);
  // L is linear in x: finite differences are exact up to roundoff (~1e-11 here).
  EXPECT_LE(test::max_grad_err(dx, test::finite_diff_grad(x0, loss)), 1e-8);
}

TEST(Rope, backward_undoes_forward_for_every_head_and_position) {
  const int64_t T = 24, S = 12, H = 3, D = 16;
  std::vector<float> cos(S * D / 2), sin(S * D / 2);
  rope_table(Tensor(cos.data(), {S, D / 2}), Tensor(sin.data(), {S, D / 2}),
             rope_inv_freq(D, kTheta), 1.0, 0);
  const std::vector<float> x0 = test::random_floats(T * H * D, 23);
  std::vector<float> x = x0;
  rope_forward(Tensor(x.data(), {T, H * D}), ConstTensor(cos.data(), {S, D / 2}),
               ConstTensor(sin.data(), {S, D / 2}), D);
  rope_backward(Tensor(x.data(), {T, H * D}), ConstTensor(cos.data(), {S, D / 2}),
                ConstTensor(sin.data(), {S, D / 2}), D);
  // Rotation by +a then -a with float tables: cos^2 + sin^2 = 1 to ~2u, plus 6 roundings.
  EXPECT_LE(test::max_rel_err(x, test::to_double(x0), 1.0), 10.0 * kFloatU);
}

TEST(Rope, rejects_odd_head_dim_and_mismatched_tables) {
  std::vector<float> buf(256);
  Tensor x(buf.data(), {4, 12}), cos(buf.data(), {4, 3}), sin(buf.data(), {4, 3});
  EXPECT_THROW(rope_forward(x, cos, sin, 5), Error);                            // odd D
  EXPECT_THROW(rope_forward(x, cos, sin, 8), Error);                            // 12 % 8 != 0
  EXPECT_THROW(rope_backward(x, cos, Tensor(buf.data(), {3, 3}), 6), Error);    // sin rows
  EXPECT_THROW(rope_table(cos, sin, rope_inv_freq(8, kTheta), 1.0, 0), Error);  // 4 frequencies
  EXPECT_THROW(rope_table(cos, sin, rope_inv_freq(6, kTheta), 0.0, 0), Error);  // no factor
  EXPECT_THROW(rope_table(cos, sin, rope_inv_freq(6, kTheta), 1.0, -1), Error);
}

}  // namespace
}  // namespace memo::cpu

namespace memo::cpu {
namespace {

// A row range [r0, r1) rotated with first_row = r0 equals the same rows of the whole tensor: the
// memo strategy rebuilds q and k this way (rows across sequence boundaries included).
TEST(Rope, row_range_with_first_row_matches_whole_tensor) {
  const int64_t S = 13, T = 3 * S, H = 2, D = 6;
  std::vector<float> cos(S * D / 2), sin(S * D / 2);
  rope_table(Tensor(cos.data(), {S, D / 2}), Tensor(sin.data(), {S, D / 2}),
             rope_inv_freq(D, kTheta), 1.0, 0);
  const ConstTensor cv(cos.data(), {S, D / 2}), sv(sin.data(), {S, D / 2});
  for (bool backward : {false, true}) {
    std::vector<float> whole = test::random_floats(T * H * D, 5), part = whole;
    auto apply = [&](Tensor x, int64_t first_row) {
      if (backward)
        rope_backward(x, cv, sv, D, first_row);
      else
        rope_forward(x, cv, sv, D, first_row);
    };
    apply(Tensor(whole.data(), {T, H * D}), 0);
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 5}, {5, 17}, {17, T}}) {
      apply(Tensor(part.data(), {T, H * D}).slice_rows(r0, r1), r0);
    }
    EXPECT_EQ(whole, part) << (backward ? "backward" : "forward");
  }
}

}  // namespace
}  // namespace memo::cpu
