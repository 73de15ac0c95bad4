// matmul through the build's BLAS vs the float64 reference: every transpose combination, awkward
// sizes, strided views, alpha and beta; repeatability; shape checks; the library's name; the peak.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/matmul_peak.h"
#include "reference/reference.h"

namespace memo::cpu {
namespace {

using test::kFloatU;

struct MatmulCase {
  int64_t M, N, K;
};
const std::vector<MatmulCase> kCases = {{1, 1, 1},    {1, 7, 13},   {13, 1, 7},   {7, 13, 1},
                                        {17, 33, 97}, {97, 31, 64}, {64, 80, 257}};

// Runs one product on views padded by `pad` columns (ld = cols + pad) and checks it against the
// reference. Error bound: any summation order of K products, plus alpha and beta, stays within
// gamma_{K+2} = (K+2)u / (1 - (K+2)u) of |alpha| sum_k |a b| + |beta c| (Higham, Accuracy and
// Stability of Numerical Algorithms, 2nd ed., section 3.5).
void check_matmul(MatmulCase mc, bool ta, bool tb, float alpha, float beta, int64_t pad) {
  const auto [M, N, K] = mc;
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const std::vector<float> a = test::random_floats(ar * (ac + pad), 60),
                           b = test::random_floats(br * (bc + pad), 61);
  std::vector<float> c = test::random_floats(M * (N + pad), 62);
  ConstTensor av(a.data(), {ar, ac}, {ac + pad, 1}), bv(b.data(), {br, bc}, {bc + pad, 1});
  std::vector<double> ad = test::to_double(a), bd = test::to_double(b), cd = test::to_double(c);
  ConstTensorF64 adv(ad.data(), {ar, ac}, {ac + pad, 1}), bdv(bd.data(), {br, bc}, {bc + pad, 1});
  // |a| |b| products, for the error scale.
  std::vector<double> abs_a(ad.size()), abs_b(bd.size()), abs_ab(M * (N + pad));
  for (size_t i = 0; i < ad.size(); ++i) abs_a[i] = std::abs(ad[i]);
  for (size_t i = 0; i < bd.size(); ++i) abs_b[i] = std::abs(bd[i]);
  matmul_ref(TensorF64(abs_ab.data(), {M, N}, {N + pad, 1}),
             ConstTensorF64(abs_a.data(), {ar, ac}, {ac + pad, 1}),
             ConstTensorF64(abs_b.data(), {br, bc}, {bc + pad, 1}), ta, tb);
  std::vector<double> scale(c.size(), 1.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      scale[i * (N + pad) + j] = std::abs(alpha) * abs_ab[i * (N + pad) + j] +
                                 std::abs(beta * cd[i * (N + pad) + j]) + 1e-30;
  const std::vector<float> c_before = c;
  matmul(Tensor(c.data(), {M, N}, {N + pad, 1}), av, bv, ta, tb, alpha, beta);
  matmul_ref(TensorF64(cd.data(), {M, N}, {N + pad, 1}), adv, bdv, ta, tb, alpha, beta);
  const double n = double(K + 2), gamma = n * kFloatU / (1.0 - n * kFloatU);
  EXPECT_LE(test::max_scaled_err(c, cd, scale), gamma)
      << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb << " pad " << pad;
  for (int64_t i = 0; i < M; ++i)  // the padding columns are not touched
    for (int64_t j = N; j < N + pad; ++j)
      ASSERT_EQ(c[i * (N + pad) + j], c_before[i * (N + pad) + j]);
}

TEST(Matmul, matches_float64_reference_for_every_transpose_and_awkward_sizes) {
  for (const MatmulCase& mc : kCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_matmul(mc, ta, tb, 1.0f, 0.0f, 0);
}

TEST(Matmul, honours_row_strides_alpha_and_beta) {
  for (const MatmulCase& mc : kCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_matmul(mc, ta, tb, -0.75f, 0.5f, 5);
}

TEST(Matmul, empty_inner_dimension_scales_c_by_beta) {
  std::vector<float> c = {1, 2, 3, 4, 5, NAN}, a(1), b(1);
  matmul(Tensor(c.data(), {2, 3}), ConstTensor(a.data(), {2, 0}), ConstTensor(b.data(), {0, 3}),
         false, false, 1.0f, 0.5f);
  EXPECT_EQ(c[1], 1.0f);
  EXPECT_TRUE(std::isnan(c[5]));
  matmul(Tensor(c.data(), {2, 3}), ConstTensor(a.data(), {0, 2}), ConstTensor(b.data(), {3, 0}),
         true, true, 1.0f, 0.0f);
  EXPECT_EQ(c, std::vector<float>(6, 0.0f));  // beta = 0 overwrites, NaN included (BLAS rule)
}

TEST(Matmul, gives_the_same_bits_on_repeated_calls) {
  const int64_t M = 200, N = 190, K = 180;  // large enough for the BLAS to use both threads
  const std::vector<float> a = test::random_floats(M * K, 63), b = test::random_floats(N * K, 64);
  std::vector<float> c1(M * N), c2(M * N);
  matmul(Tensor(c1.data(), {M, N}), ConstTensor(a.data(), {M, K}), ConstTensor(b.data(), {N, K}),
         false, true);
  for (int rep = 0; rep < 3; ++rep) {
    matmul(Tensor(c2.data(), {M, N}), ConstTensor(a.data(), {M, K}), ConstTensor(b.data(), {N, K}),
           false, true);
    ASSERT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float))) << "rep " << rep;
  }
}

TEST(Matmul, rejects_mismatched_shapes_and_column_strides) {
  std::vector<float> buf(256);
  Tensor c(buf.data(), {4, 5}), a(buf.data(), {4, 3}), b(buf.data(), {3, 5});
  EXPECT_NO_THROW(matmul(c, a, b, false, false));
  EXPECT_THROW(matmul(c, a, b, true, false), Error);  // a^T is [3, 4]
  EXPECT_THROW(matmul(c, a, b, false, true), Error);  // b^T is [5, 3]
  EXPECT_THROW(matmul(Tensor(buf.data(), {4, 6}), a, b, false, false), Error);
  EXPECT_THROW(matmul(c, a, ConstTensor(buf.data(), {3, 5}, {1, 3}), false, false), Error);
  EXPECT_THROW(matmul(c, a, ConstTensor(buf.data(), {15}), false, false), Error);
}

TEST(Matmul, names_its_library_and_warns_on_one_line) {
  const std::string name = blas_name();
  EXPECT_TRUE(name.find("OpenBLAS") != std::string::npos ||
              name.find("oneDNN") != std::string::npos)
      << name;
  EXPECT_EQ(blas_warning().find('\n'), std::string::npos);
}

TEST(MatmulPeak, measures_a_positive_rate) {
  // 0 seconds: the warm-up and the minimum two timed calls only (~0.5 s here).
  const double flops = measure_matmul_peak_flops(0.0);
  EXPECT_GT(flops, 1e9);  // any BLAS on any x86-64 core manages 1 GFLOP/s
}

}  // namespace
}  // namespace memo::cpu

namespace memo::cpu {
namespace {

// Note [Token panels]: rows [r0, T) recomputed from a panel boundary r0 equal the full product's
// rows bit for bit, with beta = 0 and beta = 1; and the product is within BLAS accuracy.
TEST(MatmulTokenPanels, rebuilt_rows_from_a_panel_boundary_are_bitwise_equal) {
  const int64_t T = 3 * kTokenPanelRows + 37, K = 48, N = 72;
  const std::vector<float> a = test::random_floats(T * K, 1), b = test::random_floats(N * K, 2);
  const std::vector<float> c0 = test::random_floats(T * N, 3);
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> whole = c0;
    matmul_token_panels(Tensor(whole.data(), {T, N}), ConstTensor(a.data(), {T, K}),
                        ConstTensor(b.data(), {N, K}), beta);
    std::vector<float> plain = c0;
    matmul(Tensor(plain.data(), {T, N}), ConstTensor(a.data(), {T, K}),
           ConstTensor(b.data(), {N, K}), false, true, 1.0f, beta);
    for (size_t i = 0; i < plain.size(); ++i)
      ASSERT_NEAR(whole[i], plain[i], 1e-4 * (1.0 + std::fabs(plain[i]))) << i;
    for (int64_t r0 : {int64_t(0), kTokenPanelRows, 3 * kTokenPanelRows}) {
      std::vector<float> part = c0;
      matmul_token_panels(Tensor(part.data(), {T, N}).slice_rows(r0, T),
                          ConstTensor(a.data(), {T, K}).slice_rows(r0, T),
                          ConstTensor(b.data(), {N, K}), beta);
      EXPECT_EQ(0, std::memcmp(whole.data() + r0 * N, part.data() + r0 * N,
                               size_t((T - r0) * N) * sizeof(float)))
          << "r0 " << r0 << " beta " << beta;
    }
  }
}

}  // namespace
}  // namespace memo::cpu
