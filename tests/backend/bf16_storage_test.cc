// bf16 storage over the CPU's f32 kernels (Note [bf16 storage by conversion]): a kernel reads its
// bf16 arguments exactly, computes in f32 and rounds each bf16 output once; f32 arguments pass
// through; strided bf16 outputs change only their own elements.
#include "memo/backend/bf16_storage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "memo/cpu/cpu_backend.h"

namespace memo {
namespace {

// The CPU backend with its native bf16 products off: every kernel f32, as this file tests.
CpuBackend& f32_cpu() {
  static CpuBackend be(
      CpuOptions{.bf16_products = false, .bf16_attention = false, .bf16_elementwise = false});
  return be;
}

std::vector<bf16> random_bf16(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<bf16> v(static_cast<size_t>(n));
  for (bf16& x : v) x = float_to_bf16(d(rng));
  return v;
}

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out;
  for (bf16 x : v) out.push_back(bf16_to_float(x));
  return out;
}

// The distance of x from y in units of bf16's spacing at y (2^-7 |y| up to a power of two).
double bf16_ulps(float x, double y) {
  const double spacing = std::ldexp(1.0, std::ilogb(std::max(std::abs(y), 1e-30)) - 7);
  return std::abs(double(x) - y) / spacing;
}

// A bf16 product accumulated (beta = 1) into a column slice of a wider bf16 matrix: each element
// is the double product plus the old value, rounded once (within one bf16 step, the f32 sum's
// order aside), and the columns outside the slice keep their bits.
TEST(Bf16Storage, a_product_accumulates_into_a_strided_bf16_slice_rounded_once) {
  Bf16StorageBackend be(f32_cpu());
  const int64_t M = 5, K = 37, N = 6, W = 9;
  std::vector<bf16> a = random_bf16(M * K, 1), b = random_bf16(N * K, 2), c = random_bf16(M * W, 3);
  const std::vector<bf16> c0 = c;
  const View<bf16> cv(c.data(), {M, W});
  be.matmul(cv.slice_cols(2, 2 + N), View<const bf16>(a.data(), {M, K}),
            View<const bf16>(b.data(), {N, K}), false, true, 1.0f, 1.0f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < W; ++j) {
      const size_t at = size_t(i * W + j);
      if (j < 2 || j >= 2 + N) {
        EXPECT_EQ(c[at].bits, c0[at].bits) << i << "," << j;
        continue;
      }
      double want = bf16_to_float(c0[at]);
      for (int64_t k = 0; k < K; ++k)
        want += double(bf16_to_float(a[size_t(i * K + k)])) *
                double(bf16_to_float(b[size_t((j - 2) * K + k)]));
      EXPECT_LE(bf16_ulps(bf16_to_float(c[at]), want), 1.0) << i << "," << j;
    }
}

// bf16 operands into an f32 output (a weight gradient): the f32 kernel's bits on the widened
// operands, written in place (no rounding of the f32 result).
TEST(Bf16Storage, bf16_operands_into_an_f32_output_give_the_f32_kernels_bits) {
  Bf16StorageBackend be(f32_cpu());
  const int64_t M = 7, K = 19, N = 4;
  const std::vector<bf16> a = random_bf16(K * M, 4), b = random_bf16(K * N, 5);
  std::vector<float> got(static_cast<size_t>(M * N), 0.5f), want(static_cast<size_t>(M * N), 0.5f);
  be.matmul(View<float>(got.data(), {M, N}), View<const bf16>(a.data(), {K, M}),
            View<const bf16>(b.data(), {K, N}), true, false, 1.0f, 1.0f);
  const std::vector<float> aw = widen(a), bw = widen(b);
  f32_cpu().matmul(View<float>(want.data(), {M, N}), View<const float>(aw.data(), {K, M}),
                   View<const float>(bw.data(), {K, N}), true, false, 1.0f, 1.0f);
  EXPECT_EQ(got, want);
}

// A norm with bf16 input, weight and output and an f32 statistic: the output is the f32 kernel's
// result rounded to nearest even, the statistic the f32 kernel's bits.
TEST(Bf16Storage, rmsnorm_rounds_its_bf16_output_and_keeps_its_f32_statistic) {
  Bf16StorageBackend be(f32_cpu());
  const int64_t T = 6, C = 24;
  const std::vector<bf16> x = random_bf16(T * C, 6), w = random_bf16(C, 7);
  std::vector<bf16> y(static_cast<size_t>(T * C));
  std::vector<float> inv(static_cast<size_t>(T)), want_y(static_cast<size_t>(T * C)),
      want_inv(static_cast<size_t>(T));
  be.rmsnorm_forward(View<bf16>(y.data(), {T, C}), View<float>(inv.data(), {T}),
                     View<const bf16>(x.data(), {T, C}), View<const bf16>(w.data(), {C}), 1e-5f);
  const std::vector<float> xw = widen(x), ww = widen(w);
  cpu_backend().rmsnorm_forward(
      View<float>(want_y.data(), {T, C}), View<float>(want_inv.data(), {T}),
      View<const float>(xw.data(), {T, C}), View<const float>(ww.data(), {C}), 1e-5f);
  EXPECT_EQ(inv, want_inv);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i].bits, float_to_bf16(want_y[i]).bits) << i;
}

// The widened copies are grow-only scratch: repeating a call allocates nothing more; a dtype
// memo does not store activations in is refused by name.
TEST(Bf16Storage, scratch_stays_put_and_other_dtypes_are_refused) {
  Bf16StorageBackend be(f32_cpu());
  EXPECT_EQ(be.activation_dtype(), DType::kBF16);
  std::vector<bf16> x = random_bf16(64, 8);
  be.scale(View<bf16>(x.data(), {64}), 2.0f);
  const int64_t held = be.scratch_bytes();
  EXPECT_EQ(held, 64 * 4);
  be.scale(View<bf16>(x.data(), {8, 8}), 0.5f);
  EXPECT_EQ(be.scratch_bytes(), held);
  std::vector<uint16_t> half(16);
  const Tensor f16(half.data(), Shape{16}, DType::kF16, MemSpace::kHost);
  try {
    be.fill(f16, 0.0f);
    FAIL() << "an f16 tensor was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("f16 argument"), std::string::npos) << e.what();
  }
}

// A backend with bf16 products (CUDA's cuBLASLt) gets two bf16 operands as they are; a product
// with an f32 operand is widened for it as for any f32 kernel.
TEST(Bf16Storage, a_backend_with_bf16_products_gets_bf16_operands_as_they_are) {
  struct Native final : CpuBackend {
    bool bf16_products() const override { return true; }
    void do_matmul(Tensor c, ConstTensor a, ConstTensor b, bool ta, bool tb, float alpha,
                   float beta) override {
      seen.push_back(a.dtype());
      seen.push_back(c.dtype());
      if (a.dtype() == DType::kF32) CpuBackend::do_matmul(c, a, b, ta, tb, alpha, beta);
    }
    std::vector<DType> seen;
  } native;
  Bf16StorageBackend be(native);
  std::vector<bf16> a = random_bf16(8, 9), c(4);
  std::vector<float> f(8, 1.0f), out(4);
  be.matmul(View<bf16>(c.data(), {2, 2}), View<const bf16>(a.data(), {2, 4}),
            View<const bf16>(a.data(), {2, 4}), false, true, 1.0f, 0.0f);
  be.matmul(View<float>(out.data(), {2, 2}), View<const float>(f.data(), {2, 4}),
            View<const bf16>(a.data(), {2, 4}), false, true, 1.0f, 0.0f);
  EXPECT_EQ(native.seen,
            (std::vector<DType>{DType::kBF16, DType::kBF16, DType::kF32, DType::kF32}));
}

// A backend with bf16 attention (CUDA's chunked attention) gets bf16 activations as they are, with
// its f32 lse and scratch; one without gets them widened.
TEST(Bf16Storage, a_backend_with_bf16_attention_gets_bf16_activations_as_they_are) {
  struct Native final : CpuBackend {
    bool native = true;
    bool bf16_attention() const override { return native; }
    void do_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                              int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                              AttnMask mask) override {
      seen.push_back(q.dtype());
      seen.push_back(lse.dtype());
      if (q.dtype() == DType::kF32)
        CpuBackend::do_attention_forward(o, lse, q, k, v, batch, n_heads, n_kv_heads, scratch,
                                         mask);
    }
    void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                               ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                               int64_t batch, int64_t n_heads, int64_t n_kv_heads, Tensor scratch,
                               AttnMask mask) override {
      seen.push_back(dq.dtype());
      if (dq.dtype() == DType::kF32)
        CpuBackend::do_attention_backward(dq, dk, dv, dout, q, k, v, o, lse, batch, n_heads,
                                          n_kv_heads, scratch, mask);
    }
    std::vector<DType> seen;
  } inner;
  Bf16StorageBackend be(inner);
  EXPECT_TRUE(be.bf16_attention());
  const int64_t S = 5, H = 2, D = 4;
  std::vector<bf16> q = random_bf16(S * H * D, 3), o(S * H * D), g(S * H * D);
  std::vector<float> lse(H * S),
      scratch(size_t(std::max(be.attention_forward_scratch_numel(S, D, H, H),
                              be.attention_backward_scratch_numel(S, D, H, H))));
  const View<const bf16> x(q.data(), {S, H * D});
  const Tensor lse_t = View<float>(lse.data(), {1, H, S});
  const Tensor sc = View<float>(scratch.data(), {int64_t(scratch.size())});
  for (bool native : {true, false}) {
    inner.native = native;
    be.attention_forward(View<bf16>(o.data(), {S, H * D}), lse_t, x, x, x, 1, H, H, sc,
                         AttnMask::kCausal);
    be.attention_backward(View<bf16>(g.data(), {S, H * D}), View<bf16>(g.data(), {S, H * D}),
                          View<bf16>(g.data(), {S, H * D}), x, x, x, x,
                          View<const bf16>(o.data(), {S, H * D}), lse_t, 1, H, H, sc,
                          AttnMask::kCausal);
  }
  EXPECT_EQ(inner.seen, (std::vector<DType>{DType::kBF16, DType::kF32, DType::kBF16, DType::kF32,
                                            DType::kF32, DType::kF32}));
}

// A backend with bf16 row and elementwise kernels (CUDA) gets bf16 tensors as they are, as long as
// the statistics and gradient arguments are f32; otherwise they are widened for it.
TEST(Bf16Storage, a_backend_with_bf16_elementwise_kernels_gets_bf16_tensors_as_they_are) {
  struct Native final : CpuBackend {
    bool bf16_elementwise() const override { return true; }
    void do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                            float eps) override {
      seen.push_back(x.dtype());
      if (x.dtype() == DType::kF32) CpuBackend::do_rmsnorm_forward(y, inv_rms, x, w, eps);
    }
    void do_add_into(Tensor dst, ConstTensor src) override {
      seen.push_back(dst.dtype());
      if (dst.dtype() == DType::kF32) CpuBackend::do_add_into(dst, src);
    }
    std::vector<DType> seen;
  } inner;
  Bf16StorageBackend be(inner);
  EXPECT_TRUE(be.bf16_elementwise());
  std::vector<bf16> x = random_bf16(12, 4), y(12), stat16(3);
  std::vector<float> stat(3);
  const View<const bf16> X(x.data(), {3, 4}), W(x.data(), {4});
  be.rmsnorm_forward(View<bf16>(y.data(), {3, 4}), View<float>(stat.data(), {3}), X, W, 1e-5f);
  be.rmsnorm_forward(View<bf16>(y.data(), {3, 4}), View<bf16>(stat16.data(), {3}), X, W, 1e-5f);
  be.add_into(View<bf16>(y.data(), {3, 4}), X);
  EXPECT_EQ(inner.seen, (std::vector<DType>{DType::kBF16, DType::kF32, DType::kBF16}));
}

// Products over more token rows than one chunk (Note [Widened products by chunks]): the token
// panels keep the f32 kernel's bits on the widened operands, rounded once, accumulating or not; the
// widened scratch holds the weight and one chunk, not the whole operand.
TEST(Bf16Storage, token_panels_by_chunks_keep_the_f32_kernels_bits) {
  Bf16StorageBackend be(f32_cpu());
  ASSERT_TRUE(be.widens_by_chunks());
  const int64_t K = 64, N = 48;
  const int64_t T = 3 * Bf16StorageBackend::kChunkBytes / ((K + N) * 4) + 92;  // 4 chunks
  const std::vector<bf16> a = random_bf16(T * K, 10), b = random_bf16(N * K, 11);
  const std::vector<float> aw = widen(a), bw = widen(b);
  for (float beta : {0.0f, 1.0f}) {
    std::vector<bf16> c = random_bf16(T * N, 12);
    std::vector<float> want = widen(c);
    be.matmul_token_panels(View<bf16>(c.data(), {T, N}), View<const bf16>(a.data(), {T, K}),
                           View<const bf16>(b.data(), {N, K}), beta);
    f32_cpu().matmul_token_panels(View<float>(want.data(), {T, N}),
                                  View<const float>(aw.data(), {T, K}),
                                  View<const float>(bw.data(), {N, K}), beta);
    for (size_t i = 0; i < c.size(); ++i)
      ASSERT_EQ(c[i].bits, float_to_bf16(want[i]).bits) << "beta " << beta << " at " << i;
  }
  EXPECT_LE(be.scratch_bytes(), N * K * 4 + Bf16StorageBackend::kChunkBytes);
}

// A plain product by chunks of rows (dx = dy w, the down projection) and a weight's gradient by
// chunks of its sum over tokens (dw += dy^T x into f32): each element within one bf16 step (the
// rounded product) or the f32 sum's bound (the gradient) of the double reference, a NaN in c
// cleared where beta = 0, and a repeat gives the same bits.
TEST(Bf16Storage, products_and_gradients_by_chunks_match_the_double_reference) {
  Bf16StorageBackend be(f32_cpu());
  const int64_t K = 40, N = 24;
  const int64_t T = 2 * Bf16StorageBackend::kChunkBytes / ((K + N) * 4) + 333;  // 3 chunks
  const std::vector<bf16> a = random_bf16(T * K, 13), b = random_bf16(N * K, 14),
                          dy = random_bf16(T * N, 15);
  // c = a b^T + c (bf16, accumulating), rounded once per element
  std::vector<bf16> c = random_bf16(T * N, 16);
  const std::vector<bf16> c0 = c;
  be.matmul(View<bf16>(c.data(), {T, N}), View<const bf16>(a.data(), {T, K}),
            View<const bf16>(b.data(), {N, K}), false, true, 1.0f, 1.0f);
  for (int64_t i = 0; i < T; i += 7)
    for (int64_t j = 0; j < N; ++j) {
      double want = bf16_to_float(c0[size_t(i * N + j)]);
      for (int64_t k = 0; k < K; ++k)
        want += double(bf16_to_float(a[size_t(i * K + k)])) *
                double(bf16_to_float(b[size_t(j * K + k)]));
      ASSERT_LE(bf16_ulps(bf16_to_float(c[size_t(i * N + j)]), want), 1.0) << i << "," << j;
    }
  // dw = alpha dy^T a + beta dw (f32): |error| <= T u sum_t |dy a| (f32's u = 2^-24), with
  // beta = 0 over a NaN and beta = 1 over 0.5
  for (float beta : {0.0f, 1.0f}) {
    const float start = beta == 0.0f ? std::nanf("") : 0.5f;
    std::vector<float> dw(size_t(N * K), start), again(size_t(N * K), start);
    for (std::vector<float>* out : {&dw, &again})
      be.matmul(View<float>(out->data(), {N, K}), View<const bf16>(dy.data(), {T, N}),
                View<const bf16>(a.data(), {T, K}), true, false, 0.5f, beta);
    EXPECT_EQ(dw, again) << "beta " << beta;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < K; ++j) {
        double want = beta == 0.0f ? 0.0 : 0.5, bound = 0.0;
        for (int64_t t = 0; t < T; ++t) {
          const double p = 0.5 * double(bf16_to_float(dy[size_t(t * N + i)])) *
                           double(bf16_to_float(a[size_t(t * K + j)]));
          want += p;
          bound += std::abs(p);
        }
        ASSERT_LE(std::abs(double(dw[size_t(i * K + j)]) - want),
                  double(T + 2) * std::ldexp(1.0, -24) * (bound + 0.5))
            << "beta " << beta << " at " << i << "," << j;
      }
  }
}

}  // namespace
}  // namespace memo
