// The two kernels GPT-2 layers add: bias_add against its float64 sum (one float add per element is
// correctly rounded, so the result equals the double sum rounded once, bit for bit), and
// matmul_token_panels_kn (weights [K, N], strided column slices too) against a float64 product,
// with a token range rebuilt from a panel boundary bit-identical to the full product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

TEST(BiasAdd, equals_the_double_sum_rounded_once) {
  for (auto [T, C] : {test::RowShape{1, 1}, test::RowShape{7, 13}, test::RowShape{300, 97},
                      test::RowShape{129, 257}}) {
    std::vector<float> y = test::random_floats(T * C, 80);
    const std::vector<float> b = test::random_floats(C, 81), y0 = y;
    bias_add(Tensor(y.data(), {T, C}), ConstTensor(b.data(), {C}));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(y[size_t(t * C + c)], float(double(y0[size_t(t * C + c)]) + double(b[size_t(c)])))
            << T << "x" << C << " at " << t << "," << c;
  }
}

TEST(BiasAdd, rejects_a_bias_of_the_wrong_width) {
  std::vector<float> y(12), b(5);
  EXPECT_THROW(bias_add(Tensor(y.data(), {3, 4}), ConstTensor(b.data(), {5})), Error);
}

TEST(MatmulTokenPanelsKn, matches_float64_and_rebuilds_rows_bitwise) {
  const int64_t T = 300, K = 48, wide = 3 * 40,
                N = 40;  // b: columns [40, 80) of a [48, 120] weight
  const std::vector<float> a = test::random_floats(T * K, 82),
                           w = test::random_floats(K * wide, 83);
  const ConstTensor b = ConstTensor(w.data(), {K, wide}).slice_cols(N, 2 * N);
  std::vector<float> c(size_t(T * N));
  matmul_token_panels_kn(Tensor(c.data(), {T, N}), ConstTensor(a.data(), {T, K}), b);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0.0, scale = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        ref += double(a[size_t(t * K + k)]) * double(b(k, n));
        scale += std::fabs(double(a[size_t(t * K + k)]) * double(b(k, n)));
      }
      // K products summed in fp32: error below K u of the sum of magnitudes
      ASSERT_LE(std::fabs(double(c[size_t(t * N + n)]) - ref), double(K) * 6e-8 * scale)
          << t << "," << n;
    }
  const int64_t r0 = kTokenPanelRows;
  std::vector<float> re(size_t(T * N), 0.0f);
  matmul_token_panels_kn(Tensor(re.data(), {T, N}).slice_rows(r0, T),
                         ConstTensor(a.data(), {T, K}).slice_rows(r0, T), b);
  EXPECT_EQ(0, std::memcmp(c.data() + r0 * N, re.data() + r0 * N, size_t((T - r0) * N) * 4));
}

}  // namespace
}  // namespace memo::cpu
