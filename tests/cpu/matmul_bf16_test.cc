// The CPU's native bf16 products (Note [bf16 products on the CPU]) against a float64 product of the
// same bf16 values: every transpose, f32 and bf16 outputs, strided views, alpha and beta; token
// panels rebuilt from a panel boundary bit for bit; repeatability; the CPU backend's dispatch. On a
// CPU without AVX512-BF16 or AMX (or under MEMO_CPU_ISA=avx512) the native tests skip and say so;
// tests/cli/bf16_cpu_test.cc runs both paths in one process each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/core/dtype.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {
namespace {

using test::kFloatU;
constexpr double kBf16U = 0x1p-8;  // bf16's unit roundoff: 8 significant bits, nearest even

std::vector<bf16> random_bf16s(int64_t n, uint64_t seed) {
  std::vector<bf16> out;
  for (float x : test::random_floats(n, seed)) out.push_back(float_to_bf16(x));
  return out;
}

struct Bf16Case {
  int64_t M, N, K;
};
// 1-wide edges, sizes off every tile (AMX tiles are 16 x 32 bf16), K past one 64-deep block
const std::vector<Bf16Case> kBf16Cases = {{1, 1, 1},    {1, 7, 13},   {13, 1, 7},    {7, 13, 1},
                                          {17, 33, 97}, {97, 31, 64}, {130, 80, 257}};

// One product on views padded by `pad` columns, c f32 or bf16, against the float64 product of the
// same bf16 values. A product of two bf16 values is exact in f32 (8 + 8 significant bits), so the
// f32 sum in any order is within gamma_{K+2} = (K+2)u / (1 - (K+2)u) of |alpha| sum |a b| +
// |beta c| (Higham, section 3.5, as the f32 test), and a bf16 c adds one rounding of the result:
// u_bf16 |exact| + (1 + u_bf16) times the f32 bound.
template <class C>
void check_bf16_product(Bf16Case cs, bool ta, bool tb, float alpha, float beta, int64_t pad) {
  const auto [M, N, K] = cs;
  constexpr bool kBf16Out = std::is_same_v<C, bf16>;
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const std::vector<bf16> a = random_bf16s(ar * (ac + pad), 70),
                          b = random_bf16s(br * (bc + pad), 71);
  std::vector<C> c;
  for (float x : test::random_floats(M * (N + pad), 72)) {
    if constexpr (kBf16Out)
      c.push_back(float_to_bf16(x));
    else
      c.push_back(beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : x);  // beta 0 clears
  }
  const std::vector<C> before = c;
  auto at = [](const std::vector<bf16>& v, int64_t ld, int64_t i, int64_t j) {
    return double(bf16_to_float(v[size_t(i * ld + j)]));
  };
  auto old_c = [&](int64_t i, int64_t j) {
    if constexpr (kBf16Out)
      return double(bf16_to_float(before[size_t(i * (N + pad) + j)]));
    else
      return double(before[size_t(i * (N + pad) + j)]);
  };
  matmul_bf16(memo::Tensor(View<C>(c.data(), {M, N}, {N + pad, 1})),
              memo::ConstTensor(View<const bf16>(a.data(), {ar, ac}, {ac + pad, 1})),
              memo::ConstTensor(View<const bf16>(b.data(), {br, bc}, {bc + pad, 1})), ta, tb, alpha,
              beta);
  const double n = double(K + 2), gamma = n * kFloatU / (1.0 - n * kFloatU);
  double worst = 0.0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N + pad; ++j) {
      const size_t e = size_t(i * (N + pad) + j);
      double got;
      if constexpr (kBf16Out)
        got = bf16_to_float(c[e]);
      else
        got = c[e];
      if (j >= N) {  // the padding is not touched
        if constexpr (kBf16Out)
          ASSERT_EQ(c[e].bits, before[e].bits);
        else
          ASSERT_EQ(std::memcmp(&c[e], &before[e], sizeof(float)), 0);
        continue;
      }
      double exact = 0.0, abs_sum = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = ta ? at(a, ac + pad, k, i) : at(a, ac + pad, i, k);
        const double y = tb ? at(b, bc + pad, j, k) : at(b, bc + pad, k, j);
        exact += x * y;
        abs_sum += std::abs(x * y);
      }
      exact *= alpha;
      double scale = std::abs(alpha) * abs_sum;
      if (beta != 0.0f) {
        exact += beta * old_c(i, j);
        scale += std::abs(beta * old_c(i, j));
      }
      const double bound =
          kBf16Out ? kBf16U * std::abs(exact) + (1 + kBf16U) * gamma * scale : gamma * scale;
      ASSERT_TRUE(std::isfinite(got)) << i << "," << j;
      const double err = std::abs(got - exact);
      ASSERT_LE(err, bound + 1e-30) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb
                                    << " pad " << pad << " at " << i << "," << j;
      worst = std::max(worst, err / (bound + 1e-30));
    }
  EXPECT_LE(worst, 1.0);
}

#define SKIP_WITHOUT_BF16_PRODUCTS() \
  if (!bf16_products_native()) GTEST_SKIP() << bf16_products_name()

TEST(MatmulBf16, every_transpose_into_f32_is_within_the_f32_sum_bound) {
  SKIP_WITHOUT_BF16_PRODUCTS();
  for (const Bf16Case& cs : kBf16Cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t pad : {0, 3}) {
          check_bf16_product<float>(cs, ta, tb, 1.0f, 0.0f, pad);
          check_bf16_product<float>(cs, ta, tb, 0.5f, 1.0f, pad);  // a weight gradient's +=
        }
}

TEST(MatmulBf16, every_transpose_into_bf16_is_rounded_once) {
  SKIP_WITHOUT_BF16_PRODUCTS();
  for (const Bf16Case& cs : kBf16Cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t pad : {0, 5}) {
          check_bf16_product<bf16>(cs, ta, tb, 1.0f, 0.0f, pad);
          check_bf16_product<bf16>(cs, ta, tb, -0.25f, 1.0f, pad);
          check_bf16_product<bf16>(cs, ta, tb, 1.0f, -0.5f, pad);
        }
}

TEST(MatmulBf16, an_empty_sum_scales_c) {
  SKIP_WITHOUT_BF16_PRODUCTS();
  std::vector<bf16> a, b;
  std::vector<bf16> c = {float_to_bf16(3.0f), float_to_bf16(-1.5f)};
  matmul_bf16(memo::Tensor(View<bf16>(c.data(), {1, 2})),
              memo::ConstTensor(View<const bf16>(a.data(), {1, 0})),
              memo::ConstTensor(View<const bf16>(b.data(), {2, 0})), false, true, 1.0f, 0.5f);
  EXPECT_EQ(bf16_to_float(c[0]), 1.5f);
  EXPECT_EQ(bf16_to_float(c[1]), -0.75f);
}

// Token panels (Note [Token panels]): rows [r0, T) of a product rebuilt from a panel boundary
// have the bits of the same rows of the whole product, for both weight layouts; and a call
// repeats its bits.
TEST(MatmulBf16, token_panels_rebuild_rows_from_a_panel_start_bit_for_bit) {
  SKIP_WITHOUT_BF16_PRODUCTS();
  const int64_t T = 3 * kTokenPanelRows + 17, N = 96, K = 80;
  const std::vector<bf16> x = random_bf16s(T * K, 80), w = random_bf16s(N * K, 81);
  for (bool trans_b : {true, false}) {
    std::vector<bf16> full(size_t(T * N)), again(size_t(T * N)), part(size_t(T * N));
    const memo::ConstTensor xv(View<const bf16>(x.data(), {T, K}));
    const memo::ConstTensor wv(View<const bf16>(w.data(), trans_b ? Shape{N, K} : Shape{K, N}));
    matmul_bf16_token_panels(memo::Tensor(View<bf16>(full.data(), {T, N})), xv, wv, trans_b);
    matmul_bf16_token_panels(memo::Tensor(View<bf16>(again.data(), {T, N})), xv, wv, trans_b);
    for (size_t i = 0; i < full.size(); ++i) ASSERT_EQ(full[i].bits, again[i].bits) << i;
    for (int64_t r0 : {kTokenPanelRows, 2 * kTokenPanelRows}) {
      matmul_bf16_token_panels(memo::Tensor(View<bf16>(part.data(), {T, N})).slice_rows(r0, T),
                               xv.slice_rows(r0, T), wv, trans_b);
      for (int64_t i = r0 * N; i < T * N; ++i)
        ASSERT_EQ(part[size_t(i)].bits, full[size_t(i)].bits) << "r0 " << r0 << " at " << i;
    }
  }
}

// Note [Packed weights for token panels]: the panels read b laid out once per call, into c's
// column slice with beta, for both weight layouts, and in column blocks where b passes the
// 64 MiB of one layout (K 2048 x N 16448 bf16): the results against a double reference, and rows
// rebuilt from a panel start with the whole call's bits.
TEST(MatmulBf16, token_panels_on_laid_out_weights_match_the_reference) {
  SKIP_WITHOUT_BF16_PRODUCTS();
  struct Case {
    int64_t T, N, K, ldc;
    float beta;
    int64_t col_step;  // the columns checked against the reference
  };
  for (const Case& cs : {Case{2 * kTokenPanelRows + 9, 40, 72, 48, 0.5f, 1},
                         Case{kTokenPanelRows + 3, 16448, 2048, 16448, 0.0f, 97}})
    for (bool trans_b : {true, false}) {
      if (cs.N > 1000 && !trans_b) continue;  // one wide case is enough
      SCOPED_TRACE(testing::Message() << "N " << cs.N << (trans_b ? " b [N, K]" : " b [K, N]"));
      const int64_t T = cs.T, N = cs.N, K = cs.K;
      const std::vector<bf16> x = random_bf16s(T * K, 82), w = random_bf16s(N * K, 83);
      const std::vector<float> c0 = test::random_floats(T * cs.ldc, 84);
      std::vector<float> c = c0, part = c0;
      const memo::ConstTensor xv(View<const bf16>(x.data(), {T, K}));
      const memo::ConstTensor wv(View<const bf16>(w.data(), trans_b ? Shape{N, K} : Shape{K, N}));
      const auto out = [&](std::vector<float>& v) {
        return memo::Tensor(View<float>(v.data(), {T, cs.ldc})).slice_cols(0, N);
      };
      matmul_bf16_token_panels(out(c), xv, wv, trans_b, cs.beta);
      for (int64_t i = 0; i < T; i += (N > 1000 ? kTokenPanelRows - 1 : 1))
        for (int64_t j = 0; j < N; j += cs.col_step) {
          double want = cs.beta * double(c0[size_t(i * cs.ldc + j)]), mag = std::abs(want);
          for (int64_t k = 0; k < K; ++k) {
            const double p = double(bf16_to_float(x[size_t(i * K + k)])) *
                             double(bf16_to_float(w[size_t(trans_b ? j * K + k : k * N + j)]));
            want += p, mag += std::abs(p);
          }
          ASSERT_NEAR(c[size_t(i * cs.ldc + j)], want, 1e-6 * K * mag) << i << "," << j;
        }
      matmul_bf16_token_panels(out(part).slice_rows(kTokenPanelRows, T),
                               xv.slice_rows(kTokenPanelRows, T), wv, trans_b, cs.beta);
      EXPECT_EQ(0, std::memcmp(part.data() + kTokenPanelRows * cs.ldc,
                               c.data() + kTokenPanelRows * cs.ldc,
                               (T - kTokenPanelRows) * cs.ldc * sizeof(float)));
    }
}

// The backend sends two bf16 operands to the native products when they are on and the CPU has
// them; with them off (the reference of Note [bf16 storage by conversion]) it takes f32 only.
TEST(MatmulBf16, the_cpu_backend_dispatches_by_its_option_and_the_cpu) {
  CpuBackend off(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  EXPECT_FALSE(off.bf16_products());
  EXPECT_NE(off.describe().find(bf16_products_native() ? "bf16 products off" : "no bf16 products"),
            std::string::npos)
      << off.describe();
  CpuBackend on;
  EXPECT_EQ(on.bf16_products(), bf16_products_native());
  EXPECT_NE(on.describe().find(bf16_products_name()), std::string::npos) << on.describe();
  std::vector<bf16> a = random_bf16s(4 * 8, 90), b = random_bf16s(8 * 3, 91);
  std::vector<float> c(12);
  const memo::ConstTensor av(View<const bf16>(a.data(), {4, 8})),
      bv(View<const bf16>(b.data(), {8, 3}));
  EXPECT_THROW(off.matmul(View<float>(c.data(), {4, 3}), av, bv, false, false), Error);
  if (!bf16_products_native()) GTEST_SKIP() << bf16_products_name();
  on.matmul(View<float>(c.data(), {4, 3}), av, bv, false, false);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double want = 0.0;
      for (int64_t k = 0; k < 8; ++k)
        want += double(bf16_to_float(a[size_t(i * 8 + k)])) *
                double(bf16_to_float(b[size_t(k * 3 + j)]));
      EXPECT_NEAR(c[size_t(i * 3 + j)], want, 1e-5) << i << "," << j;
    }
}

}  // namespace
}  // namespace memo::cpu
