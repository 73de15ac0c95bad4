// Bias gradient: fp32 kernel vs the float64 reference on awkward shapes and magnitudes, and the
// same bits for one and two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

TEST(BiasGrad, matches_float64_reference_and_accumulates) {
  // 1e36: a float running sum over 97 rows could overflow; 1e-36: near the normal float floor.
  for (float magnitude : {1.0f, 1e36f, 1e-36f}) {
    std::vector<test::RowShape> shapes = test::awkward_shapes();
    for (int64_t C : {1, 7, 13, 97}) shapes.push_back({5, C});
    for (auto [T, C] : shapes) {
      std::vector<float> dy = test::random_floats(T * C, 70), db = test::random_floats(C, 71);
      for (float& v : dy) v *= magnitude;
      for (float& v : db) v *= magnitude;
      std::vector<double> dyd = test::to_double(dy), dbd = test::to_double(db), scale(C);
      for (int64_t c = 0; c < C; ++c) scale[c] = std::abs(dbd[c]);
      for (int64_t i = 0; i < T * C; ++i) scale[i % C] += std::abs(dyd[i]);
      bias_backward(Tensor(db.data(), {C}), ConstTensor(dy.data(), {T, C}));
      bias_backward_ref(TensorF64(dbd.data(), {C}), ConstTensorF64(dyd.data(), {T, C}));
      // The sum is in double and rounded once (<= u of the result); 2u leaves room for the double
      // sums (~T 1e-16 of the scale).
      EXPECT_LE(test::max_scaled_err(db, dbd, scale), 2.0 * kFloatU) << T << "x" << C;
    }
  }
}

TEST(BiasGrad, gives_the_same_bits_on_one_and_two_threads) {
  for (auto [T, C] : {test::RowShape{67, 257}, test::RowShape{2048, 97}}) {  // both parallel
    const std::vector<float> dy = test::random_floats(T * C, 72);
    auto run = [&](int threads) {
      std::vector<float> db = test::random_floats(C, 73);
      test::with_threads(threads, [&] {
        bias_backward(Tensor(db.data(), {C}), ConstTensor(dy.data(), {T, C}));
      });
      return db;
    };
    EXPECT_EQ(run(1), run(2)) << T << "x" << C;
  }
}

TEST(BiasGrad, rejects_mismatched_shapes) {
  std::vector<float> buf(64);
  EXPECT_THROW(bias_backward(Tensor(buf.data(), {7}), ConstTensor(buf.data(), {4, 8})), Error);
  EXPECT_THROW(bias_backward(Tensor(buf.data(), {8}), ConstTensor(buf.data(), {32})), Error);
}

}  // namespace
}  // namespace memo::cpu
