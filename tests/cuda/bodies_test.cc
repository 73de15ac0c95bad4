// The CUDA kernels' arithmetic (cuda/bodies.h), compiled for the host: every body runs over every
// work item of a launch, as the GPU threads would, on seeded random inputs, and is compared with
// the CPU kernel (cpu/) on the same inputs: bitwise where the formulas and orders are the
// same, within a stated tolerance where the exp, a summation order or the softmax's scheme differs.
// "Bitwise" holds for the host compiler; nvcc contracts a * b + c into one fused multiply-add where
// GCC may not, so on the GPU the same bodies agree with the CPU within an ulp per such step
// (tests/gpu/cuda_backend_check.cc compares within tolerances for that reason).
#include "memo/cuda/bodies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/kernel_test_util.h"
#include "memo/backend/attn_mask.h"
#include "memo/backend/backend.h"
#include "memo/backend/checks.h"
#include "memo/backend/optim_steps.h"
#include "memo/core/dtype.h"
#include "memo/core/tensor.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/optim_kernels.h"
#include "memo/cpu/tensor_ops.h"
#include "memo/cuda/chunked_attention.h"

namespace memo::cuda {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// What the padding of a strided matrix holds: no kernel may write there.
constexpr float kPad = 1234.5f;

// Tolerances, relative to a per-element magnitude (the sum of the absolute values of the terms a
// result adds, so that cancellation does not inflate the ratio):
// - kExpTol: the same float formula, but the bodies call ::expf (< 1 ulp) where the CPU kernels
//   call exp_f32 (<= 3 ulp, vec_math.h), or a double row sum that the CPU reassociates (omp simd
//   reduction) rounds the other way: a few ulp (u = 6e-8) of the result.
constexpr double kExpTol = 1e-6;
// - kAttnTol: attention, relative to max |reference|: the bodies run an online softmax key by key
//   with expf, the CPU kernel 64 x 64 tiles with a Cephes exp (~2e-7), so float sums of S terms
//   and D-term dot products are added in other orders.
constexpr double kAttnTol = 1e-5;
// - kAttnBf16Tol: the chunked attention in bf16 against the f32 kernels over the same inputs,
//   relative to max(max |reference|, 1) with O(1) inputs. With u = 2^-8 (bf16's unit roundoff):
//   o = sum_t P_t v_t with each P_t rounded (|error| <= u sum_t P_t |v_t| <= u max |v|), then o
//   rounded (u |o|): 2u. The backward's products take dS and P rounded (u each term) and their
//   results are rounded once (u): the random-signed errors add far below the 4u worst case of a
//   term-by-term bound, which is the tolerance.
constexpr double kAttnBf16Tol = 4.0 / 256.0;

// A [rows, cols] fp32 matrix stored `ld` floats a row (padding kPad), as Mat, CMat or view.
struct Buf {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> v;

  Buf(int64_t r, int64_t c, int64_t l, float fill) : rows(r), cols(c), ld(l), v(r * l, kPad) {
    for (int64_t i = 0; i < r; ++i) std::fill_n(v.begin() + i * l, c, fill);
  }
  static Buf random(int64_t r, int64_t c, int64_t l, uint64_t seed, float lo = -1.0f,
                    float hi = 1.0f) {
    Buf b(r, c, l, 0.0f);
    const std::vector<float> x = test::random_floats(r * c, seed, lo, hi);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) b.v[i * l + j] = x[i * c + j];
    return b;
  }
  Mat mat() { return {v.data(), rows, cols, ld}; }
  CMat cmat() const { return {v.data(), rows, cols, ld}; }
  View<float> t() { return View<float>(v.data(), {rows, cols}, {ld, 1, 0, 0}); }
  View<const float> ct() const { return View<const float>(v.data(), {rows, cols}, {ld, 1, 0, 0}); }
  float at(int64_t r, int64_t c) const { return v[r * ld + c]; }
  // The rows x cols elements, contiguous.
  std::vector<float> logical() const {
    std::vector<float> out(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = v[i * ld + j];
    return out;
  }
  bool padding_intact() const {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = cols; j < ld; ++j)
        if (std::bit_cast<uint32_t>(v[i * ld + j]) != std::bit_cast<uint32_t>(kPad)) return false;
    return true;
  }
};

std::vector<float> nan_vec(int64_t n) { return std::vector<float>(n, kNaN); }

// The arguments printed one after the other: a trace label.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Bitwise equality of two float vectors (so NaN == NaN and -0 != +0); reports the first mismatch.
void expect_bits_eq(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      if (first < 0) first = int64_t(i);
      ++bad;
    }
  if (bad > 0)
    ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " differ; first at " << first
                  << ": body " << str(std::hexfloat, got[first]) << ", cpu "
                  << str(std::hexfloat, want[first]);
}
void expect_bits_eq(const Buf& got, const Buf& want, const std::string& what) {
  expect_bits_eq(got.v, want.v, what);
}

// max_i |got_i - want_i| / scale_i; a NaN or infinite difference (an element the body did not
// write, still NaN) counts as infinite unless both are the same bits.
double max_err(const std::vector<float>& got, const std::vector<float>& want,
               const std::vector<double>& scale) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])) continue;
    const double err = std::abs(double(got[i]) - double(want[i]));
    if (!std::isfinite(err)) return INFINITY;
    worst = std::max(worst, scale[i] > 0.0 ? err / scale[i] : INFINITY);
  }
  return worst;
}
// Per-element scale |want_i| (or floor, if larger).
double max_rel_err(const std::vector<float>& got, const std::vector<float>& want,
                   double floor = 0.0) {
  std::vector<double> scale(want.size());
  for (size_t i = 0; i < want.size(); ++i) scale[i] = std::max(std::abs(double(want[i])), floor);
  return max_err(got, want, scale);
}
// One scale for all: max(max_i |want_i|, floor).
double max_err_vs_max(const std::vector<float>& got, const std::vector<float>& want,
                      double floor = 0.0) {
  double m = floor;
  for (float w : want) m = std::max(m, std::abs(double(w)));
  return max_err(got, want, std::vector<double>(want.size(), m));
}

// Shapes of the row-wise tests: [T, C] with row stride ld (> C: a strided view).
struct Shape2 {
  int64_t T, C, ld;
};
const std::vector<Shape2>& row_shapes() {
  static const std::vector<Shape2> shapes = {{1, 1, 1},      {7, 13, 13},  {13, 97, 97},
                                             {67, 257, 257}, {11, 37, 45}, {5, 130, 131}};
  return shapes;
}
std::string name(const Shape2& s) { return str(s.T, "x", s.C, " ld ", s.ld); }

// --- RMSNorm ---

TEST(CudaBodies, bf16_conversion_matches_the_host_rounding_bit_for_bit) {
  std::mt19937_64 rng(11);
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                    0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f7fffffu,
                                    0x3f808000u, 0x3f818000u, 0x00008000u, 0x00018000u};
  for (int i = 0; i < 100000; ++i) patterns.push_back(uint32_t(rng()));
  for (uint32_t u : patterns) {
    const float f = std::bit_cast<float>(u);
    ASSERT_EQ(to_bf16_bits(f), float_to_bf16(f).bits) << std::hex << u;
    const uint16_t b = uint16_t(u >> 16);
    const float back = from_bf16_bits(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(bf16_to_float(bf16{b})))
        << std::hex << b;
  }
}

TEST(CudaBodies, rmsnorm_forward_backward_and_dw_match_cpu) {
  constexpr float kEps = 1e-5f;
  for (const Shape2& s : row_shapes()) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf x = Buf::random(T, C, ld, 1), dy = Buf::random(T, C, ld + 3, 2);
    const std::vector<float> w = test::random_floats(C, 3, 0.5f, 2.0f);
    // Forward.
    Buf y_cpu(T, C, ld + 1, kNaN), y_body(T, C, ld + 1, kNaN);
    std::vector<float> r_cpu = nan_vec(T), r_body = nan_vec(T);
    cpu::rmsnorm_forward(y_cpu.t(), View<float>(r_cpu.data(), {T}), x.ct(),
                         View<const float>(w.data(), {C}), kEps);
    for (int64_t t = 0; t < T; ++t)
      rmsnorm_forward_row(y_body.mat(), r_body.data(), x.cmat(), w.data(), kEps, t);
    // inv_rms: a double sum (reassociated on the CPU) rounded once; y = x r w from it.
    EXPECT_LE(max_rel_err(r_body, r_cpu), kExpTol);
    EXPECT_LE(max_rel_err(y_body.logical(), y_cpu.logical()), kExpTol);
    EXPECT_TRUE(y_body.padding_intact());
    // Backward, from the CPU's inv_rms, adding into the same random dx and dw.
    const Buf dx0 = Buf::random(T, C, ld + 2, 4);
    const std::vector<float> dw0 = test::random_floats(C, 5);
    Buf dx_cpu = dx0, dx_body = dx0;
    std::vector<float> dw_cpu = dw0, dw_body = dw0;
    cpu::rmsnorm_backward(dx_cpu.t(), View<float>(dw_cpu.data(), {C}), dy.ct(), x.ct(),
                          View<const float>(w.data(), {C}), View<const float>(r_cpu.data(), {T}));
    for (int64_t t = 0; t < T; ++t)
      rmsnorm_backward_row(dx_body.mat(), dy.cmat(), x.cmat(), w.data(), r_cpu.data(), t);
    for (int64_t c = 0; c < C; ++c)
      rmsnorm_dw_col(dw_body.data(), dy.cmat(), x.cmat(), r_cpu.data(), c);
    // dx = dx0 + r w dy - x coef: coef comes from a reassociated double dot (may round 1 ulp
    // apart); the scale is the sum of the three terms' magnitudes.
    std::vector<double> scale(T * C);
    for (int64_t t = 0; t < T; ++t) {
      double dot = 0.0;
      for (int64_t c = 0; c < C; ++c) dot += double(w[c]) * dy.at(t, c) * x.at(t, c);
      const double r = r_cpu[t], coef = r * r * r * dot / double(C);
      for (int64_t c = 0; c < C; ++c)
        scale[t * C + c] =
            std::abs(dx0.at(t, c)) + std::abs(r * w[c] * dy.at(t, c)) + std::abs(x.at(t, c) * coef);
    }
    EXPECT_LE(max_err(dx_body.logical(), dx_cpu.logical(), scale), kExpTol);
    EXPECT_TRUE(dx_body.padding_intact());
    // dw: both sum tokens in order 0..T-1 in double: the same bits.
    expect_bits_eq(dw_body, dw_cpu, "dw");
  }
}

// --- LayerNorm ---

TEST(CudaBodies, layernorm_forward_backward_and_dwdb_match_cpu) {
  constexpr float kEps = 1e-5f;
  for (const Shape2& s : row_shapes()) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    // An offset mean (x - mean cancels) and a spread of scales.
    const Buf x = Buf::random(T, C, ld, 11, 2.0f, 5.0f), dy = Buf::random(T, C, ld + 1, 12);
    const std::vector<float> w = test::random_floats(C, 13, 0.5f, 2.0f),
                             b = test::random_floats(C, 14);
    Buf y_cpu(T, C, ld + 4, kNaN), y_body(T, C, ld + 4, kNaN);
    std::vector<float> m_cpu = nan_vec(T), m_body = nan_vec(T), r_cpu = nan_vec(T),
                       r_body = nan_vec(T);
    cpu::layernorm_forward(y_cpu.t(), View<float>(m_cpu.data(), {T}),
                           View<float>(r_cpu.data(), {T}), x.ct(), View<const float>(w.data(), {C}),
                           View<const float>(b.data(), {C}), kEps);
    for (int64_t t = 0; t < T; ++t)
      layernorm_forward_row(y_body.mat(), m_body.data(), r_body.data(), x.cmat(), w.data(),
                            b.data(), kEps, t);
    // mean and rstd: double sums (reassociated on the CPU) rounded once. y = xhat w + b, scaled
    // by |xhat w| + |b| (the sum may cancel).
    EXPECT_LE(max_rel_err(m_body, m_cpu), kExpTol);
    EXPECT_LE(max_rel_err(r_body, r_cpu), kExpTol);
    std::vector<double> y_scale(T * C);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        y_scale[t * C + c] =
            std::abs((double(x.at(t, c)) - m_cpu[t]) * r_cpu[t] * w[c]) + std::abs(b[c]);
    EXPECT_LE(max_err(y_body.logical(), y_cpu.logical(), y_scale), kExpTol);
    EXPECT_TRUE(y_body.padding_intact());
    // Backward from the CPU's mean and rstd, adding into the same dx, dw, db.
    const Buf dx0 = Buf::random(T, C, ld, 15);
    const std::vector<float> dw0 = test::random_floats(C, 16), db0 = test::random_floats(C, 17);
    Buf dx_cpu = dx0, dx_body = dx0;
    std::vector<float> dw_cpu = dw0, dw_body = dw0, db_cpu = db0, db_body = db0;
    cpu::layernorm_backward(dx_cpu.t(), View<float>(dw_cpu.data(), {C}),
                            View<float>(db_cpu.data(), {C}), dy.ct(), x.ct(),
                            View<const float>(w.data(), {C}), View<const float>(m_cpu.data(), {T}),
                            View<const float>(r_cpu.data(), {T}));
    for (int64_t t = 0; t < T; ++t)
      layernorm_backward_row(dx_body.mat(), dy.cmat(), x.cmat(), w.data(), m_cpu.data(),
                             r_cpu.data(), t);
    for (int64_t c = 0; c < C; ++c)
      layernorm_dwdb_col(dw_body.data(), db_body.data(), dy.cmat(), x.cmat(), m_cpu.data(),
                         r_cpu.data(), c);
    // dx = dx0 + r (g - mean g - xhat mean(g xhat)), the means from reassociated double sums.
    std::vector<double> dx_scale(T * C);
    for (int64_t t = 0; t < T; ++t) {
      const double m = m_cpu[t], r = r_cpu[t];
      double sg = 0.0, sgx = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const double g = double(w[c]) * dy.at(t, c);
        sg += std::abs(g);
        sgx += std::abs(g * (x.at(t, c) - m) * r);
      }
      for (int64_t c = 0; c < C; ++c) {
        const double xhat = (x.at(t, c) - m) * r;
        dx_scale[t * C + c] = std::abs(dx0.at(t, c)) + r * (std::abs(double(w[c]) * dy.at(t, c)) +
                                                            sg / C + std::abs(xhat) * sgx / C);
      }
    }
    EXPECT_LE(max_err(dx_body.logical(), dx_cpu.logical(), dx_scale), kExpTol);
    EXPECT_TRUE(dx_body.padding_intact());
    // dw, db: tokens in order in double on both sides.
    expect_bits_eq(dw_body, dw_cpu, "dw");
    expect_bits_eq(db_body, db_cpu, "db");
  }
}

// --- RoPE ---

TEST(CudaBodies, rope_rotate_pair_matches_cpu_forward_and_backward_to_an_ulp) {
  // T rows of n_heads heads of D; a table of S < T positions, so rows wrap, and offsets
  // first_row 0 and 5 (a row range of a longer tensor).
  constexpr int64_t T = 11, n_heads = 3, D = 8, S = 7, half = D / 2;
  std::vector<float> cos(S * half), sin(S * half);
  cpu::rope_table(View<float>(cos.data(), {S, half}), View<float>(sin.data(), {S, half}),
                  rope_inv_freq(D, 10000.0), 1.0, 0);
  const CMat cm{cos.data(), S, half, half}, sm{sin.data(), S, half, half};
  for (int64_t ld : {n_heads * D, n_heads * D + 5}) {
    for (int64_t first_row : {0, 5}) {
      for (float sign : {1.0f, -1.0f}) {
        SCOPED_TRACE(str("ld ", ld, " first_row ", first_row, " sign ", sign));
        const Buf x = Buf::random(T, n_heads * D, ld, 21);
        Buf x_cpu = x, x_body = x;
        if (sign > 0)
          cpu::rope_forward(x_cpu.t(), View<const float>(cos.data(), {S, half}),
                            View<const float>(sin.data(), {S, half}), D, first_row);
        else
          cpu::rope_backward(x_cpu.t(), View<const float>(cos.data(), {S, half}),
                             View<const float>(sin.data(), {S, half}), D, first_row);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < n_heads; ++h)
            for (int64_t i = 0; i < half; ++i)
              rope_rotate_pair(x_body.mat(), cm, sm, D, first_row, sign, t, h, i);
        // The same float formula element by element, x1 = a co - b s and x2 = b co + a s, but
        // not the same bits: GCC contracts one product of each into an FMA (-ffp-contract=fast is
        // its default for C++, even with -std=c++20), and which one depends on the surrounding
        // code. Observed: the CPU kernel computes fma(b, co, a s), the body here in this test a
        // different rounding, 1 ulp apart (0x1.17bf7cp-1 vs 0x1.17bf7ep-1). So within 4 u of
        // |a co| + |b s| (two roundings either way), and no padding written.
        std::vector<double> scale(T * n_heads * D);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t pos = (first_row + t) % S;
          for (int64_t h = 0; h < n_heads; ++h)
            for (int64_t i = 0; i < half; ++i) {
              const double a = x.at(t, h * D + i), b = x.at(t, h * D + half + i);
              const double co = cos[pos * half + i], si = sin[pos * half + i];
              scale[t * n_heads * D + h * D + i] = std::abs(a * co) + std::abs(b * si);
              scale[t * n_heads * D + h * D + half + i] = std::abs(b * co) + std::abs(a * si);
            }
        }
        EXPECT_LE(max_err(x_body.logical(), x_cpu.logical(), scale), 4.0 * test::kFloatU);
        EXPECT_TRUE(x_body.padding_intact());
        EXPECT_NE(x_cpu.at(1, 0), x.at(1, 0));
      }
    }
  }
}

// --- SwiGLU and GELU ---

// Inputs over the interesting range plus the extremes: 0, -0, large |x| where exp over- or
// underflows.
std::vector<float> activation_inputs(int64_t n, uint64_t seed) {
  std::vector<float> x = test::random_floats(n, seed, -8.0f, 8.0f);
  const float extremes[] = {0.0f, -0.0f, 20.0f, -20.0f, 90.0f, -90.0f, 1e20f, -1e20f, 1e-30f};
  for (size_t i = 0; i < std::size(extremes) && i < x.size(); ++i) x[i * 3] = extremes[i];
  return x;
}

TEST(CudaBodies, swiglu_forward_and_backward_match_cpu) {
  for (const Shape2& s : {Shape2{13, 97, 97}, Shape2{6, 33, 40}}) {
    const auto [T, F, ld] = s;
    SCOPED_TRACE(name(s));
    Buf g(T, F, ld, 0.0f), u = Buf::random(T, F, ld, 32, -2.0f, 2.0f),
                           da = Buf::random(T, F, ld, 33, -2.0f, 2.0f);
    const std::vector<float> gv = activation_inputs(T * F, 31);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) g.v[t * ld + f] = gv[t * F + f];
    Buf a_cpu(T, F, ld, kNaN), a_body(T, F, ld, kNaN);
    cpu::swiglu_forward(a_cpu.t(), g.ct(), u.ct());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) a_body.mat().at(t, f) = swiglu(g.at(t, f), u.at(t, f));
    // a = g s u: s carries exp's error (expf vs exp_f32), relative to |a|.
    EXPECT_LE(max_rel_err(a_body.logical(), a_cpu.logical()), kExpTol);
    Buf dg_cpu(T, F, ld, kNaN), dg_body(T, F, ld, kNaN), du_cpu(T, F, ld, kNaN),
        du_body(T, F, ld, kNaN);
    cpu::swiglu_backward(dg_cpu.t(), du_cpu.t(), da.ct(), g.ct(), u.ct());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f)
        swiglu_backward_elem(&dg_body.mat().at(t, f), &du_body.mat().at(t, f), da.at(t, f),
                             g.at(t, f), u.at(t, f));
    // dg = da u s (1 + g (1 - s)), which cancels near g = -1.28: scaled by da u s (1 + |g (1-s)|).
    std::vector<double> dg_scale(T * F);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) {
        const double gg = g.at(t, f), sg = 1.0 / (1.0 + std::exp(-gg));
        dg_scale[t * F + f] =
            std::abs(double(da.at(t, f)) * u.at(t, f) * sg) * (1.0 + std::abs(gg * (1.0 - sg)));
      }
    EXPECT_LE(max_err(dg_body.logical(), dg_cpu.logical(), dg_scale), kExpTol);
    EXPECT_LE(max_rel_err(du_body.logical(), du_cpu.logical()), kExpTol);
    // In place: dg aliasing da (du separate), and dg, du and da all one buffer (du is written
    // first, then dg over it). The body takes da by value, so both give the separate results.
    Buf dg_inplace = da, du_sep(T, F, ld, kNaN), all_one = da;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < F; ++f) {
        float* p = &dg_inplace.mat().at(t, f);
        swiglu_backward_elem(p, &du_sep.mat().at(t, f), *p, g.at(t, f), u.at(t, f));
        float* q = &all_one.mat().at(t, f);
        swiglu_backward_elem(q, q, *q, g.at(t, f), u.at(t, f));
      }
    expect_bits_eq(dg_inplace, dg_body, "dg aliasing da");
    expect_bits_eq(du_sep, du_body, "du with dg aliasing da");
    expect_bits_eq(all_one, dg_body, "dg with dg, du and da one buffer");
    EXPECT_TRUE(a_body.padding_intact() && dg_body.padding_intact() && du_body.padding_intact());
  }
}

TEST(CudaBodies, gelu_forward_and_backward_match_cpu) {
  for (const Shape2& s : {Shape2{13, 97, 97}, Shape2{6, 33, 40}}) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    Buf x(T, C, ld, 0.0f), dy = Buf::random(T, C, ld, 42, -2.0f, 2.0f);
    const std::vector<float> xv = activation_inputs(T * C, 41);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) x.v[t * ld + c] = xv[t * C + c];
    Buf y_cpu(T, C, ld, kNaN), y_body(T, C, ld, kNaN);
    cpu::gelu_forward(y_cpu.t(), x.ct());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) y_body.mat().at(t, c) = gelu(x.at(t, c));
    EXPECT_LE(max_rel_err(y_body.logical(), y_cpu.logical()), kExpTol);
    Buf dx_cpu(T, C, ld, kNaN), dx_body(T, C, ld, kNaN);
    cpu::gelu_backward(dx_cpu.t(), dy.ct(), x.ct());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        dx_body.mat().at(t, c) = gelu_backward(dy.at(t, c), x.at(t, c));
    // dx = dy (s + x s (1 - s) z'), whose two terms cancel for x < 0: scaled by their magnitudes.
    std::vector<double> scale(T * C);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const double v = x.at(t, c), v2 = std::min(v * v, 1e30);
        const double z = v * (1.5957691216057308 + 0.0713548162726 * v2);
        const double sg = 1.0 / (1.0 + std::exp(-z));
        scale[t * C + c] = std::abs(double(dy.at(t, c))) *
                           (sg + std::abs(v * sg * (1.0 - sg)) * (1.5957691216 + 0.214 * v2));
      }
    EXPECT_LE(max_err(dx_body.logical(), dx_cpu.logical(), scale), kExpTol);
    EXPECT_TRUE(y_body.padding_intact() && dx_body.padding_intact());
  }
}

// --- bias gradient and embedding backward ---

TEST(CudaBodies, bias_backward_col_matches_cpu_bitwise) {
  for (const Shape2& s : row_shapes()) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf dy = Buf::random(T, C, ld, 51);
    const std::vector<float> db0 = test::random_floats(C, 52);
    std::vector<float> db_cpu = db0, db_body = db0;
    cpu::bias_backward(View<float>(db_cpu.data(), {C}), dy.ct());
    for (int64_t c = 0; c < C; ++c) bias_backward_col(db_body.data(), dy.cmat(), c);
    // Tokens in order in double, added to db once: the same bits; and it did accumulate.
    expect_bits_eq(db_body, db_cpu, "db");
    if (T > 1) {
      EXPECT_NE(db_cpu[0], db0[0]);
    }
  }
}

TEST(CudaBodies, embedding_backward_col_matches_cpu_bitwise_with_repeated_tokens) {
  constexpr int64_t V = 5;
  for (const Shape2& s : {Shape2{40, 37, 37}, Shape2{40, 37, 44}, Shape2{1, 3, 3}}) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf dx = Buf::random(T, C, ld, 61);
    // 40 tokens over 5 ids: every id repeats, so the float adds' order matters.
    const std::vector<int32_t> tokens = test::random_ids(T, V, 62);
    const Buf dwte0 = Buf::random(V, C, C + 2, 63);
    Buf dwte_cpu = dwte0, dwte_body = dwte0;
    cpu::embedding_backward(dwte_cpu.t(), dx.ct(), View<const int32_t>(tokens.data(), {T}));
    for (int64_t c = 0; c < C; ++c)
      embedding_backward_col(dwte_body.mat(), dx.cmat(), tokens.data(), c);
    expect_bits_eq(dwte_body, dwte_cpu, "dwte");
    EXPECT_NE(dwte_cpu.at(tokens[0], 0), dwte0.at(tokens[0], 0));
  }
}

// Another tensor-parallel rank's tokens (kOtherShard): zero rows forward, no gradient backward.
TEST(CudaBodies, embedding_bodies_match_cpu_bitwise_with_another_ranks_tokens) {
  constexpr int64_t V = 5, T = 12, C = 7;
  std::vector<int32_t> tokens = test::random_ids(T, V, 64);
  for (int64_t t = 0; t < T; t += 3) tokens[t] = kOtherShard;
  const View<const int32_t> tv(tokens.data(), {T});
  const Buf wte = Buf::random(V, C, C, 65), dx = Buf::random(T, C, C, 66);
  Buf x_cpu(T, C, C, kNaN), x_body(T, C, C, kNaN);
  cpu::embedding_forward(x_cpu.t(), tv, wte.ct());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      x_body.mat().at(t, c) = embedding_forward_at(wte.cmat(), tokens.data(), t, c);
  expect_bits_eq(x_body, x_cpu, "x");
  EXPECT_EQ(x_cpu.at(0, 0), 0.0f);
  const Buf dwte0 = Buf::random(V, C, C, 67);
  Buf dwte_cpu = dwte0, dwte_body = dwte0;
  cpu::embedding_backward(dwte_cpu.t(), dx.ct(), tv);
  for (int64_t c = 0; c < C; ++c)
    embedding_backward_col(dwte_body.mat(), dx.cmat(), tokens.data(), c);
  expect_bits_eq(dwte_body, dwte_cpu, "dwte");
}

// The vocabulary-parallel loss's two passes against the CPU kernels, over 3 parts of a vocabulary.
TEST(CudaBodies, vocab_parallel_ce_rows_match_cpu) {
  constexpr float kGradScale = 0.37f;
  constexpr int64_t T = 9, Vl = 40, ranks = 3;
  const Buf logits = Buf::random(T, Vl * ranks, Vl * ranks, 73, -6.0f, 6.0f);
  std::vector<int32_t> ys = test::random_ids(T, int32_t(Vl * ranks), 74);
  ys[2] = ys[T - 1] = kIgnoredTarget;  // not counted: loss 0, a zero gradient row
  std::vector<float> stats_cpu = nan_vec(2 * ranks * T), stats_body = nan_vec(2 * ranks * T);
  std::vector<float> target(T, 0.0f);
  std::vector<std::vector<int32_t>> local(static_cast<size_t>(ranks), std::vector<int32_t>(T));
  for (int64_t r = 0; r < ranks; ++r) {
    for (int64_t t = 0; t < T; ++t)
      local[r][t] = ys[t] == kIgnoredTarget ? kIgnoredTarget
                    : ys[t] / Vl == r       ? int32_t(ys[t] - r * Vl)
                                            : kOtherShard;
    const View<const float> part = logits.ct().slice_cols(r * Vl, (r + 1) * Vl);
    std::vector<float> tl_cpu = nan_vec(T), tl_body = nan_vec(T);
    cpu::vocab_parallel_ce_stats(View<float>(stats_cpu.data() + 2 * r * T, {2, T}),
                                 View<float>(tl_cpu.data(), {T}), part,
                                 View<const int32_t>(local[r].data(), {T}));
    const CMat m{part.data(), T, Vl, part.ld()};
    for (int64_t t = 0; t < T; ++t)
      vocab_parallel_ce_stats_row(stats_body.data() + 2 * r * T, tl_body.data(), m, local[r].data(),
                                  t);
    expect_bits_eq(tl_body, tl_cpu, "target logit");  // a copy or 0
    for (int64_t t = 0; t < T; ++t) target[t] += tl_cpu[t];
  }
  EXPECT_LE(max_err(stats_body, stats_cpu, std::vector<double>(stats_cpu.size(), 1.0)) / double(Vl),
            kExpTol);
  for (int64_t r = 0; r < ranks; ++r) {
    const View<const float> part = logits.ct().slice_cols(r * Vl, (r + 1) * Vl);
    const CMat m{part.data(), T, Vl, part.ld()};
    std::vector<float> l_cpu = nan_vec(T), l_body = nan_vec(T);
    std::vector<float> d_cpu = nan_vec(T * Vl), d_body = nan_vec(T * Vl);
    cpu::vocab_parallel_ce(View<float>(l_cpu.data(), {T}), View<float>(d_cpu.data(), {T, Vl}), part,
                           View<const int32_t>(local[r].data(), {T}),
                           View<const float>(stats_cpu.data(), {2 * ranks, T}),
                           View<const float>(target.data(), {T}), kGradScale);
    for (int64_t t = 0; t < T; ++t)
      vocab_parallel_ce_row(l_body.data(), Mat{d_body.data(), T, Vl, Vl}, m, local[r].data(),
                            stats_cpu.data(), ranks, target.data(), kGradScale, t);
    EXPECT_LE(max_err(l_body, l_cpu, std::vector<double>(T, 10.0)), kExpTol);
    EXPECT_LE(max_err(d_body, d_cpu, std::vector<double>(T * Vl, kGradScale)), kExpTol);
    for (int64_t t : {int64_t(2), T - 1}) {
      EXPECT_EQ(l_body[t], 0.0f);
      for (int64_t c = 0; c < Vl; ++c) ASSERT_EQ(d_body[t * Vl + c], 0.0f) << t << " " << c;
    }
  }
}

// --- cross-entropy ---

TEST(CudaBodies, cross_entropy_row_matches_cpu_with_and_without_dlogits) {
  constexpr float kGradScale = 0.37f;
  for (const Shape2& s :
       {Shape2{13, 97, 97}, Shape2{5, 1000, 1000}, Shape2{7, 50, 61}, Shape2{3, 1, 1}}) {
    const auto [T, V, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf logits = Buf::random(T, V, ld, 71, -6.0f, 6.0f);
    std::vector<int32_t> targets = test::random_ids(T, int32_t(V), 72);
    targets[1] = kIgnoredTarget;  // not counted: loss 0, a zero gradient row
    const View<const int32_t> tv(targets.data(), {T});
    // loss = m + log(sum) - x_y: scaled by the magnitudes of its terms; expf vs exp_f32 moves
    // log(sum) by a few ulp of its 1 + ... terms.
    auto loss_scale = [&](int64_t t) {
      float m = logits.at(t, 0);
      for (int64_t c = 0; c < V; ++c) m = std::max(m, logits.at(t, c));
      double sum = 0.0;
      for (int64_t c = 0; c < V; ++c) sum += std::exp(double(logits.at(t, c)) - m);
      return targets[t] == kIgnoredTarget
                 ? 1.0
                 : std::abs(double(m)) + std::log(sum) + std::abs(double(logits.at(t, targets[t])));
    };
    std::vector<double> l_scale(T);
    for (int64_t t = 0; t < T; ++t) l_scale[t] = loss_scale(t);
    for (bool want_grad : {false, true}) {
      SCOPED_TRACE(want_grad ? "with dlogits" : "loss only");
      std::vector<float> l_cpu = nan_vec(T), l_body = nan_vec(T);
      Buf d_cpu(T, V, ld + 1, kNaN), d_body(T, V, ld + 1, kNaN);
      cpu::cross_entropy(View<float>(l_cpu.data(), {T}), want_grad ? d_cpu.t() : View<float>(),
                         logits.ct(), tv, kGradScale);
      for (int64_t t = 0; t < T; ++t)
        cross_entropy_row(l_body.data(), want_grad ? d_body.mat() : Mat{}, logits.cmat(),
                          targets.data(), kGradScale, t);
      EXPECT_LE(max_err(l_body, l_cpu, l_scale), kExpTol);
      EXPECT_EQ(l_body[1], 0.0f);
      if (!want_grad) continue;
      for (int64_t c = 0; c < V; ++c) ASSERT_EQ(d_body.at(1, c), 0.0f) << c;
      // dlogits = p grad_scale - [c == y] grad_scale: scaled by both terms.
      std::vector<double> d_scale(T * V);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < V; ++c)
          d_scale[t * V + c] =
              std::abs(double(d_cpu.at(t, c))) + (c == targets[t] ? 2.0 * kGradScale : 0.0);
      EXPECT_LE(max_err(d_body.logical(), d_cpu.logical(), d_scale), kExpTol);
      EXPECT_TRUE(d_body.padding_intact());
      // In place (dlogits aliasing logits): the same bits as into a separate buffer.
      Buf inplace = logits;
      std::vector<float> l_inplace = nan_vec(T);
      for (int64_t t = 0; t < T; ++t)
        cross_entropy_row(l_inplace.data(), inplace.mat(), inplace.cmat(), targets.data(),
                          kGradScale, t);
      expect_bits_eq(l_inplace, l_body, "loss in place");
      expect_bits_eq(inplace.logical(), d_body.logical(), "dlogits in place");
    }
  }
}

// Note [Row lanes]: the row kernels as the GPU runs them, kRowLanes lanes a row and the fixed tree,
// against the one-lane bodies (checked against the CPU above): within an ulp or two of theirs.
double lanes_sum(int lanes, const std::function<double(int)>& part) {
  std::vector<double> a(static_cast<size_t>(lanes));
  for (int lane = 0; lane < lanes; ++lane) a[size_t(lane)] = part(lane);
  for (int half = lanes / 2; half > 0; half /= 2)
    for (int lane = 0; lane < half; ++lane) row_tree_sum(a.data(), lane, half);
  return a[0];
}

TEST(CudaBodies, row_kernels_in_lanes_agree_with_the_one_lane_bodies) {
  constexpr float kEps = 1e-5f, kGradScale = 0.37f;
  const int L = kRowLanes;
  for (const Shape2& s :
       {Shape2{13, 97, 97}, Shape2{5, 1000, 1003}, Shape2{3, 2048, 2048}, Shape2{2, 1, 1}}) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf x = Buf::random(T, C, ld, 11, -3.0f, 3.0f), dy = Buf::random(T, C, ld, 12);
    const std::vector<float> w = test::random_floats(C, 13, 0.5f, 2.0f);
    // RMSNorm forward and dx
    Buf y1(T, C, ld, kNaN), yl(T, C, ld, kNaN), dx1 = Buf::random(T, C, ld, 14), dxl = dx1;
    std::vector<float> r1(T), rl(T);
    for (int64_t t = 0; t < T; ++t) {
      rmsnorm_forward_row(y1.mat(), r1.data(), x.cmat(), w.data(), kEps, t);
      rl[t] = rmsnorm_inv_rms(
          lanes_sum(L, [&](int lane) { return rmsnorm_sumsq_part(x.cmat(), t, lane, L); }), C,
          kEps);
      for (int lane = 0; lane < L; ++lane)
        rmsnorm_write_part(yl.mat(), x.cmat(), w.data(), rl[t], t, lane, L);
      rmsnorm_backward_row(dx1.mat(), dy.cmat(), x.cmat(), w.data(), r1.data(), t);
      const double dot = lanes_sum(
          L, [&](int lane) { return rmsnorm_dot_part(dy.cmat(), x.cmat(), w.data(), t, lane, L); });
      for (int lane = 0; lane < L; ++lane)
        rmsnorm_dx_part(dxl.mat(), dy.cmat(), x.cmat(), w.data(), r1.data(), dot, t, lane, L);
    }
    EXPECT_LE(max_rel_err(rl, r1), 2e-7);
    EXPECT_LE(max_err_vs_max(yl.logical(), y1.logical()), 1e-6);
    EXPECT_LE(max_err_vs_max(dxl.logical(), dx1.logical()), 1e-6);
    EXPECT_TRUE(yl.padding_intact());
    // the loss and its gradient over a "vocabulary" of C columns, in place and not
    std::vector<int32_t> targets = test::random_ids(T, int32_t(C), 15);
    targets[1] = kIgnoredTarget;  // every lane zeroes its columns
    std::vector<float> l1(T), ll(T, kNaN);
    Buf d1(T, C, ld, kNaN), dl = x;  // dl: in place over a copy of the logits
    for (int64_t t = 0; t < T; ++t) {
      cross_entropy_row(l1.data(), d1.mat(), x.cmat(), targets.data(), kGradScale, t);
      if (targets[t] == kIgnoredTarget) {
        for (int lane = 0; lane < L; ++lane) ce_ignored_part(ll.data(), dl.mat(), t, lane, L);
        continue;
      }
      std::vector<float> mx(static_cast<size_t>(L));
      for (int lane = 0; lane < L; ++lane) mx[size_t(lane)] = ce_max_part(dl.cmat(), t, lane, L);
      for (int half = L / 2; half > 0; half /= 2)
        for (int lane = 0; lane < half; ++lane) row_tree_max(mx.data(), lane, half);
      const float target_logit = dl.at(t, targets[t]);
      const double sum =
          lanes_sum(L, [&](int lane) { return ce_sum_part(dl.cmat(), t, mx[0], lane, L); });
      ll[t] = ce_loss(mx[0], sum, target_logit);
      for (int lane = 0; lane < L; ++lane)
        ce_grad_part(dl.mat(), dl.cmat(), t, mx[0], sum, targets[t], kGradScale, lane, L);
    }
    EXPECT_LE(max_rel_err(ll, l1, 1.0), 1e-6);
    EXPECT_LE(max_err_vs_max(dl.logical(), d1.logical(), kGradScale), 1e-6);
    // LayerNorm forward and dx
    Buf z1(T, C, ld, kNaN), zl(T, C, ld, kNaN), dz1 = Buf::random(T, C, ld, 16), dzl = dz1;
    const std::vector<float> b = test::random_floats(C, 17);
    std::vector<float> m1(T), s1(T), ml(T), sl(T);
    for (int64_t t = 0; t < T; ++t) {
      layernorm_forward_row(z1.mat(), m1.data(), s1.data(), x.cmat(), w.data(), b.data(), kEps, t);
      const double m =
          lanes_sum(L, [&](int lane) { return layernorm_sum_part(x.cmat(), t, lane, L); }) /
          double(C);
      const double r =
          1.0 / std::sqrt(lanes_sum(L,
                                    [&](int lane) {
                                      return layernorm_sumsq_part(x.cmat(), m, t, lane, L);
                                    }) /
                              double(C) +
                          double(kEps));
      ml[t] = float(m);
      sl[t] = float(r);
      for (int lane = 0; lane < L; ++lane)
        layernorm_write_part(zl.mat(), x.cmat(), w.data(), b.data(), m, r, t, lane, L);
      layernorm_backward_row(dz1.mat(), dy.cmat(), x.cmat(), w.data(), m1.data(), s1.data(), t);
      std::vector<double> g(static_cast<size_t>(L)), gx(static_cast<size_t>(L));
      for (int lane = 0; lane < L; ++lane)
        layernorm_grad_sums_part(dy.cmat(), x.cmat(), w.data(), m1[t], s1[t], t, lane, L,
                                 g[size_t(lane)], gx[size_t(lane)]);
      for (int half = L / 2; half > 0; half /= 2)
        for (int lane = 0; lane < half; ++lane) {
          row_tree_sum(g.data(), lane, half);
          row_tree_sum(gx.data(), lane, half);
        }
      for (int lane = 0; lane < L; ++lane)
        layernorm_dx_part(dzl.mat(), dy.cmat(), x.cmat(), w.data(), m1[t], s1[t], g[0], gx[0], t,
                          lane, L);
    }
    EXPECT_LE(max_err_vs_max(ml, m1, 1.0), 1e-6);
    EXPECT_LE(max_rel_err(sl, s1), 2e-7);
    EXPECT_LE(max_err_vs_max(zl.logical(), z1.logical()), 1e-6);
    EXPECT_LE(max_err_vs_max(dzl.logical(), dz1.logical()), 1e-6);
  }
}

// Note [Column lanes]: the column sums as the GPU runs them, kColLanes lanes a column and the
// fixed tree, against the one-lane bodies (bit for bit the CPU's above): within an ulp or two.
TEST(CudaBodies, column_kernels_in_lanes_agree_with_the_one_lane_bodies) {
  const int L = kColLanes;
  for (const Shape2& s : {Shape2{13, 97, 97}, Shape2{1000, 33, 40}, Shape2{2, 5, 5}}) {
    const auto [T, C, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf x = Buf::random(T, C, ld, 21, -3.0f, 3.0f), dy = Buf::random(T, C, ld, 22);
    const std::vector<float> r = test::random_floats(T, 23, 0.5f, 2.0f),
                             mean = test::random_floats(T, 24), rstd = test::random_floats(T, 25);
    const std::vector<float> g0 = test::random_floats(C, 26);
    std::vector<float> dw1 = g0, dwl = g0, lw1 = g0, lb1 = g0, lwl = g0, lbl = g0, b1 = g0, bl = g0;
    for (int64_t c = 0; c < C; ++c) {
      rmsnorm_dw_col(dw1.data(), dy.cmat(), x.cmat(), r.data(), c);
      dwl[size_t(c)] = float(double(dwl[size_t(c)]) + lanes_sum(L, [&](int lane) {
                               return rmsnorm_dw_part(dy.cmat(), x.cmat(), r.data(), c, lane, L);
                             }));
      layernorm_dwdb_col(lw1.data(), lb1.data(), dy.cmat(), x.cmat(), mean.data(), rstd.data(), c);
      lwl[size_t(c)] = float(double(lwl[size_t(c)]) + lanes_sum(L, [&](int lane) {
                               return layernorm_dw_part(dy.cmat(), x.cmat(), mean.data(),
                                                        rstd.data(), c, lane, L);
                             }));
      lbl[size_t(c)] = float(double(lbl[size_t(c)]) + lanes_sum(L, [&](int lane) {
                               return bias_backward_part(dy.cmat(), c, lane, L);
                             }));
      bias_backward_col(b1.data(), dy.cmat(), c);
      bl[size_t(c)] = lbl[size_t(c)];
    }
    // each a double sum rounded once to f32: the sums differ in order only
    EXPECT_LE(max_err_vs_max(dwl, dw1, 1.0), 1e-6);
    EXPECT_LE(max_err_vs_max(lwl, lw1, 1.0), 1e-6);
    EXPECT_LE(max_err_vs_max(lbl, lb1, 1.0), 1e-6);
    EXPECT_LE(max_err_vs_max(bl, b1, 1.0), 1e-6);
  }
}

// --- attention ---

struct AttnCase {
  int64_t B, S, H, Hkv, D;
};
std::string name(const AttnCase& c, AttnMask mask) {
  return str("B", c.B, " S", c.S, " H", c.H, " Hkv", c.Hkv, " D", c.D,
             mask.causal ? " causal" : " full");
}

// --- chunked attention (cuda/chunked_attention.h): the schedule CUDA runs on cuBLASLt ---

// The operations of the schedule on the CPU: products in double (cuBLASLt's order is its own),
// the softmax as the GPU kernel runs it (lanes, then the tree), the other kernels item by item.
struct HostChunkOps {
  int64_t S = 0, H = 0, D = 0;
  int64_t gemms = 0;
  int64_t madds = 0;  // multiply-adds of every product
  static float load(const void* p, int64_t i, bool bf16) {
    return bf16 ? from_bf16_bits(static_cast<const uint16_t*>(p)[i])
                : static_cast<const float*>(p)[i];
  }
  void gemm(const RowGemm& g) {
    ++gemms;
    madds += g.batch * g.m * g.n * g.k;
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      const void* A = elem(g.a, bi * g.stride_a, g.ab_bf16);
      const void* B = elem(g.b, bi * g.stride_b, g.ab_bf16);
      void* C = elem(g.c, bi * g.stride_c, g.c_bf16);
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) {
          double acc = 0.0;
          for (int64_t p = 0; p < g.k; ++p) {
            const float a = load(A, g.trans_a ? p * g.lda + i : i * g.lda + p, g.ab_bf16);
            const float b = load(B, g.trans_b ? j * g.ldb + p : p * g.ldb + j, g.ab_bf16);
            acc += double(a) * double(b);
          }
          const int64_t e = i * g.ldc + j;
          const double old = g.beta == 0.0f ? 0.0 : double(g.beta) * load(C, e, g.c_bf16);
          const float r = float(double(g.alpha) * acc + old);
          if (g.c_bf16)
            static_cast<uint16_t*>(C)[e] = to_bf16_bits(r);
          else
            static_cast<float*>(C)[e] = r;
        }
    }
  }
  void softmax(const ScoreRows& sc, float* lse_b) {
    std::vector<float> m(kSoftmaxLanes), l(kSoftmaxLanes);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < sc.n; ++r) {
        const float* row = sc.row(h, r);
        const int64_t vis = sc.visible(r), first = sc.first(r);
        for (int lane = 0; lane < kSoftmaxLanes; ++lane)
          softmax_lane(row, first, vis, lane, kSoftmaxLanes, m[lane], l[lane]);
        for (int half = kSoftmaxLanes / 2; half > 0; half /= 2)
          for (int lane = 0; lane < half; ++lane) softmax_tree_step(m.data(), l.data(), lane, half);
        for (int64_t t = 0; t < sc.cols(); ++t)
          sc.put_prob(h, r, t, softmax_prob(row[t], t, first, vis, m[0], l[0]));
        lse_b[h * S + sc.i0 + r] = m[0] + std::log(l[0]);
      }
  }
  void zero(XMat x) {
    ASSERT_FALSE(x.bf16);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.cols; ++c) x.at(r, c) = 0.0f;
  }
  void delta(float* delta, XMat dout, XMat o, int64_t b) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) chunk_delta_item(delta, dout, o, S, D, b, h, i);
  }
  void grad_scores(const ScoreRows& sc, float* dp, uint16_t* ds16, const float* lse_b,
                   const float* delta) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < sc.n; ++r)
        for (int64_t t = 0; t < sc.cols(); ++t)
          grad_scores_item(sc, dp, ds16, lse_b, delta, S, h, r, t);
  }
  void round_rows(XMat dst, XMat src) {
    ASSERT_TRUE(dst.bf16 && !src.bf16);
    for (int64_t r = 0; r < dst.rows; ++r)
      for (int64_t c = 0; c < dst.cols; ++c) dst.at(r, c) = float(src.at(r, c));
  }
};

// A Buf's values rounded to bf16 (same shape and ld; padding kept as bf16 of kPad), and back.
struct Buf16 {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<uint16_t> v;
  explicit Buf16(const Buf& b) : rows(b.rows), cols(b.cols), ld(b.ld), v(b.v.size()) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = to_bf16_bits(b.v[i]);
  }
  XMat x() { return {v.data(), rows, cols, ld, true}; }
  XVec xv() const { return {v.data(), true}; }
  Buf widened() const {
    Buf b(rows, cols, ld, 0.0f);
    for (size_t i = 0; i < v.size(); ++i) b.v[i] = from_bf16_bits(v[i]);
    return b;
  }
};

// Note [bf16 bodies]: a body over bf16 tensors gives the bits of the same body over the widened
// tensors with each output rounded once (Bf16StorageBackend's semantics), f32 arguments (the
// statistics, dw, db, dwte) bit for bit.
void expect_rounded(const Buf16& got, const Buf& f32, const char* what) {
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.cols; ++c)
      ASSERT_EQ(got.v[r * got.ld + c], to_bf16_bits(f32.v[r * f32.ld + c]))
          << what << " [" << r << ", " << c << "]";
}

TEST(CudaBodies, bodies_over_bf16_give_the_f32_bodies_bits_rounded_once) {
  const int64_t T = 13, C = 97;
  constexpr float kEps = 1e-5f;
  Buf16 x16(Buf::random(T, C, C + 3, 201, -2.0f, 2.0f)), dy16(Buf::random(T, C, C, 202)),
      w16(Buf::random(1, C, C, 203)), b16(Buf::random(1, C, C, 204)),
      acc16(Buf::random(T, C, C + 1, 205));  // what a += output holds before
  const Buf x = x16.widened(), dy = dy16.widened(), w = w16.widened(), b = b16.widened();
  {  // RMSNorm
    Buf16 y16(Buf(T, C, C, 0.0f)), dx16 = acc16;
    Buf y(T, C, C, 0.0f), dx = acc16.widened();
    std::vector<float> r16(T), r(T), dw16(C, 0.5f), dw(C, 0.5f);
    for (int64_t t = 0; t < T; ++t) {
      rmsnorm_forward_row(y16.x(), r16.data(), x16.x(), w16.xv(), kEps, t);
      rmsnorm_forward_row(y.mat(), r.data(), x.cmat(), w.v.data(), kEps, t);
      rmsnorm_backward_row(dx16.x(), dy16.x(), x16.x(), w16.xv(), r.data(), t);
      rmsnorm_backward_row(dx.mat(), dy.cmat(), x.cmat(), w.v.data(), r.data(), t);
    }
    for (int64_t c = 0; c < C; ++c) {
      rmsnorm_dw_col(dw16.data(), dy16.x(), x16.x(), r.data(), c);
      rmsnorm_dw_col(dw.data(), dy.cmat(), x.cmat(), r.data(), c);
    }
    expect_rounded(y16, y, "rmsnorm y");
    EXPECT_EQ(r16, r);
    expect_rounded(dx16, dx, "rmsnorm dx +=");
    EXPECT_EQ(dw16, dw);
  }
  {  // LayerNorm
    Buf16 y16(Buf(T, C, C, 0.0f)), dx16 = acc16;
    Buf y(T, C, C, 0.0f), dx = acc16.widened();
    std::vector<float> m16(T), m(T), s16(T), sd(T), dw16(C, 0.5f), dw(C, 0.5f), db16(C, 0.25f),
        db(C, 0.25f);
    for (int64_t t = 0; t < T; ++t) {
      layernorm_forward_row(y16.x(), m16.data(), s16.data(), x16.x(), w16.xv(), b16.xv(), kEps, t);
      layernorm_forward_row(y.mat(), m.data(), sd.data(), x.cmat(), w.v.data(), b.v.data(), kEps,
                            t);
      layernorm_backward_row(dx16.x(), dy16.x(), x16.x(), w16.xv(), m.data(), sd.data(), t);
      layernorm_backward_row(dx.mat(), dy.cmat(), x.cmat(), w.v.data(), m.data(), sd.data(), t);
    }
    for (int64_t c = 0; c < C; ++c) {
      layernorm_dwdb_col(dw16.data(), db16.data(), dy16.x(), x16.x(), m.data(), sd.data(), c);
      layernorm_dwdb_col(dw.data(), db.data(), dy.cmat(), x.cmat(), m.data(), sd.data(), c);
    }
    expect_rounded(y16, y, "layernorm y");
    EXPECT_EQ(m16, m);
    EXPECT_EQ(s16, sd);
    expect_rounded(dx16, dx, "layernorm dx");
    EXPECT_EQ(dw16, dw);
    EXPECT_EQ(db16, db);
  }
  {  // bias gradient, embedding forward and backward
    std::vector<float> db16(C, 0.25f), db(C, 0.25f);
    for (int64_t c = 0; c < C; ++c) {
      bias_backward_col(db16.data(), dy16.x(), c);
      bias_backward_col(db.data(), dy.cmat(), c);
    }
    EXPECT_EQ(db16, db);
    const std::vector<int32_t> tokens = {3, 0, 12, 3, -1, 7, 3, 12, 0, 1, 2, 5, 3};  // T ids < 13
    Buf16 e16(Buf(T, C, C, 0.0f));
    Buf e(T, C, C, 0.0f), dwte16(T, C, C, 0.5f), dwte(T, C, C, 0.5f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        e16.x().at(t, c) = embedding_forward_at(x16.x(), tokens.data(), t, c);
        e.mat().at(t, c) = embedding_forward_at(x.cmat(), tokens.data(), t, c);
      }
    for (int64_t c = 0; c < C; ++c) {
      embedding_backward_col(dwte16.mat(), dy16.x(), tokens.data(), c);
      embedding_backward_col(dwte.mat(), dy.cmat(), tokens.data(), c);
    }
    expect_rounded(e16, e, "embedding");
    EXPECT_EQ(dwte16.v, dwte.v);
  }
  {  // RoPE in place, both directions: 3 heads of 8 over the 13 rows
    const int64_t H = 3, D = 8, half = D / 2;
    Buf16 q16(Buf::random(T, H * D, H * D + 2, 206, -2.0f, 2.0f));
    Buf q = q16.widened();
    const Buf cos = Buf::random(T + 4, half, half, 207), sin = Buf::random(T + 4, half, half, 208);
    for (float sign : {1.0f, -1.0f})
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < half; ++i) {
            rope_rotate_pair(q16.x(), cos.cmat(), sin.cmat(), D, 4, sign, t, h, i);
            rope_rotate_pair(q.mat(), cos.cmat(), sin.cmat(), D, 4, sign, t, h, i);
            // the f32 side rounds where the bf16 side stores: keep them on the same values
            q.mat().at(t, h * D + i) = from_bf16_bits(to_bf16_bits(q.at(t, h * D + i)));
            q.mat().at(t, h * D + half + i) =
                from_bf16_bits(to_bf16_bits(q.at(t, h * D + half + i)));
          }
    expect_rounded(q16, q, "rope");
  }
}

// The chunked schedule against the CPU kernels, chunks of `rows` query rows (0: chunk_rows). bf16:
// the inputs rounded to bf16, the outputs bf16, against the CPU's f32 kernels over the same
// (widened) inputs; returns the largest error of each of o, dq, dk, dv relative to the largest
// |reference| (at least 1).
std::vector<double> check_chunked_attention(const AttnCase& c, AttnMask mask, int64_t rows,
                                            bool bf16 = false) {
  SCOPED_TRACE(str(name(c, mask), " rows ", rows, bf16 ? " bf16" : " f32"));
  const int64_t B = c.B, S = c.S, H = c.H, Hkv = c.Hkv, D = c.D, T = B * S;
  ChunkShape cs = chunk_shape(B, S, H, Hkv, D, mask.causal);
  if (rows > 0) cs.rows = rows;
  cs.key_start = cs.key_start_host = mask.key_start.empty() ? nullptr : mask.key_start.data();
  // q and o strided (ld > cols) as the model's column slices can be
  Buf q = Buf::random(T, H * D, H * D + 3, 91, -2.0f, 2.0f),
      k = Buf::random(T, Hkv * D, Hkv * D, 92, -2.0f, 2.0f),
      v = Buf::random(T, Hkv * D, Hkv * D, 93), dout = Buf::random(T, H * D, H * D, 94);
  Buf16 q16(q), k16(k), v16(v), dout16(dout);
  if (bf16) q = q16.widened(), k = k16.widened(), v = v16.widened(), dout = dout16.widened();
  Buf o_cpu(T, H * D, H * D, kNaN), o_chunk(T, H * D, H * D + 5, kNaN);
  std::vector<float> lse_cpu = nan_vec(B * H * S), lse_chunk = nan_vec(B * H * S);
  std::vector<float> fwd_scratch(cpu::attention_forward_scratch_numel(D, H, Hkv));
  cpu::attention_forward(o_cpu.t(), View<float>(lse_cpu.data(), {B, H, S}), q.ct(), k.ct(), v.ct(),
                         B, H, Hkv, View<float>(fwd_scratch.data(), {int64_t(fwd_scratch.size())}),
                         mask);
  HostChunkOps ops{S, H, D};
  std::vector<float> scratch = nan_vec(chunked_backward_scratch_numel(cs));
  Buf16 o16(o_chunk);
  if (bf16)
    chunked_attention_forward(ops, cs, o16.x(), lse_chunk.data(), q16.x(), k16.x(), v16.x(),
                              scratch.data());
  else
    chunked_attention_forward(ops, cs, o_chunk.mat(), lse_chunk.data(), q.cmat(), k.cmat(),
                              v.cmat(), scratch.data());
  const int64_t chunks = B * ((S + cs.rows - 1) / cs.rows);
  EXPECT_EQ(ops.gemms, chunks * 2 * (H / Hkv));
  if (bf16) o_chunk = o16.widened();
  std::vector<double> errs;
  const double tol = bf16 ? kAttnBf16Tol : kAttnTol;
  errs.push_back(max_err_vs_max(o_chunk.logical(), o_cpu.logical(), 1.0));
  EXPECT_LE(errs.back(), tol) << "o";
  // lse comes from f32 scores of the same (bf16) inputs either way
  EXPECT_LE(max_rel_err(lse_chunk, lse_cpu, 1.0), kAttnTol) << "lse";
  if (!bf16) {
    EXPECT_TRUE(o_chunk.padding_intact());
  }
  // Backward from the CPU's o and lse on both sides; dk and dv start as NaN (the schedule zeroes)
  Buf dq_cpu(T, H * D, H * D, kNaN), dq_chunk(T, H * D, H * D + 1, kNaN);
  Buf dk_cpu(T, Hkv * D, Hkv * D, kNaN), dk_chunk(T, Hkv * D, Hkv * D + 2, kNaN);
  Buf dv_cpu(T, Hkv * D, Hkv * D, kNaN), dv_chunk(T, Hkv * D, Hkv * D, kNaN);
  Buf16 o_cpu16(o_cpu);  // the bf16 run's o: the CPU's, rounded
  if (bf16) o_cpu = o_cpu16.widened();
  std::vector<float> bwd_scratch(cpu::attention_backward_scratch_numel(S, D, H, Hkv));
  cpu::attention_backward(dq_cpu.t(), dk_cpu.t(), dv_cpu.t(), dout.ct(), q.ct(), k.ct(), v.ct(),
                          o_cpu.ct(), View<const float>(lse_cpu.data(), {B, H, S}), B, H, Hkv,
                          View<float>(bwd_scratch.data(), {int64_t(bwd_scratch.size())}), mask);
  if (bf16) {
    Buf16 dq16(dq_chunk), dk16(dk_chunk), dv16(dv_chunk);
    chunked_attention_backward(ops, cs, dq16.x(), dk16.x(), dv16.x(), dout16.x(), q16.x(), k16.x(),
                               v16.x(), o_cpu16.x(), lse_cpu.data(), scratch.data());
    dq_chunk = dq16.widened(), dk_chunk = dk16.widened(), dv_chunk = dv16.widened();
  } else {
    chunked_attention_backward(ops, cs, dq_chunk.mat(), dk_chunk.mat(), dv_chunk.mat(), dout.cmat(),
                               q.cmat(), k.cmat(), v.cmat(), o_cpu.cmat(), lse_cpu.data(),
                               scratch.data());
    EXPECT_TRUE(dq_chunk.padding_intact());
    EXPECT_TRUE(dk_chunk.padding_intact());
  }
  errs.push_back(max_err_vs_max(dq_chunk.logical(), dq_cpu.logical(), 1.0));
  EXPECT_LE(errs.back(), tol) << "dq";
  errs.push_back(max_err_vs_max(dk_chunk.logical(), dk_cpu.logical(), 1.0));
  EXPECT_LE(errs.back(), tol) << "dk";
  errs.push_back(max_err_vs_max(dv_chunk.logical(), dv_cpu.logical(), 1.0));
  EXPECT_LE(errs.back(), tol) << "dv";
  return errs;
}

TEST(CudaBodies, chunked_attention_schedule_matches_cpu) {
  for (AttnMask mask : {AttnMask::kCausal, AttnMask::kFull}) {
    // several chunks, the last one short; GQA 2 and 4 query heads per kv head
    check_chunked_attention({2, 37, 4, 2, 16}, mask, 16);
    check_chunked_attention({1, 70, 8, 2, 8}, mask, 32);
    check_chunked_attention({1, 70, 2, 1, 64}, mask, 0);  // one chunk
    check_chunked_attention({1, 9, 3, 3, 100}, mask, 16);
    check_chunked_attention({2, 1, 2, 2, 8}, mask, 0);
    // more keys a row than softmax lanes: lanes hold several columns, the tree combines them all
    check_chunked_attention({1, 300, 2, 1, 8}, mask, 64);
  }
}

// A mask's key_start (backend/attn_mask.h): documents starting inside a chunk and on its edges,
// a sliding window, and a full mask whose first keys run from before the keys to inside them.
TEST(CudaBodies, chunked_attention_with_key_start_matches_cpu) {
  const int64_t S = 70;
  std::vector<int32_t> docs(2 * S), window(S), full(S);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0, start = 0; i < S; ++i) {
      for (int64_t s : b == 0 ? std::vector<int64_t>{16, 17, 40} : std::vector<int64_t>{33})
        if (i == s) start = s;
      docs[size_t(b * S + i)] = int32_t(start);
    }
  for (int64_t i = 0; i < S; ++i) {
    window[size_t(i)] = int32_t(std::max<int64_t>(0, i - 20));
    full[size_t(i)] = int32_t(i - 30);
  }
  for (bool bf16 : {false, true}) {
    check_chunked_attention({2, S, 4, 2, 16},
                            AttnMask::causal_from(View<const int32_t>(docs.data(), {2 * S})), 16,
                            bf16);
    check_chunked_attention(
        {1, S, 2, 1, 8}, AttnMask::causal_from(View<const int32_t>(window.data(), {S})), 32, bf16);
    check_chunked_attention({1, S, 2, 2, 8},
                            AttnMask::full_from(View<const int32_t>(full.data(), {S})), 16, bf16);
  }
}

// Note [Chunked attention]: a chunk's products start at the block of its first row's first key.
// A window of documents then costs what the same documents cost as sequences of their own, and
// gives the bits of the schedule that computes every key (the host copy of key_start withheld).
TEST(CudaBodies, chunked_attention_skips_the_keys_before_a_chunks_documents) {
  const int64_t H = 4, Hkv = 2, D = 8, rows = 16;
  struct Run {
    std::vector<float> o, lse, dq, dk, dv;
    int64_t forward = 0, backward = 0;  // multiply-adds
  };
  // One causal call over B sequences of S rows with key_start ks (empty: none); skip: the schedule
  // has the host copy.
  auto run = [&](int64_t B, int64_t S, const std::vector<int32_t>& ks, bool skip, bool bf16) {
    SCOPED_TRACE(str("B", B, " S", S, skip ? " skip" : "", bf16 ? " bf16" : " f32"));
    ChunkShape cs = chunk_shape(B, S, H, Hkv, D, true, rows);
    cs.key_start = ks.empty() ? nullptr : ks.data();
    cs.key_start_host = skip ? cs.key_start : nullptr;
    const int64_t T = B * S;
    Buf q = Buf::random(T, H * D, H * D, 71, -2.0f, 2.0f),
        k = Buf::random(T, Hkv * D, Hkv * D, 72, -2.0f, 2.0f),
        v = Buf::random(T, Hkv * D, Hkv * D, 73), dout = Buf::random(T, H * D, H * D, 74);
    Buf o(T, H * D, H * D, kNaN), dq(T, H * D, H * D, kNaN), dk(T, Hkv * D, Hkv * D, kNaN),
        dv(T, Hkv * D, Hkv * D, kNaN);
    Buf16 q16(q), k16(k), v16(v), dout16(dout), o16(o), dq16(dq), dk16(dk), dv16(dv);
    auto x = [&](Buf& f, Buf16& h) { return bf16 ? h.x() : XMat(f.mat()); };
    Run r;
    r.lse = nan_vec(B * H * S);
    std::vector<float> scratch = nan_vec(chunked_backward_scratch_numel(cs));
    HostChunkOps ops{S, H, D};
    chunked_attention_forward(ops, cs, x(o, o16), r.lse.data(), x(q, q16), x(k, k16), x(v, v16),
                              scratch.data());
    r.forward = ops.madds;
    chunked_attention_backward(ops, cs, x(dq, dq16), x(dk, dk16), x(dv, dv16), x(dout, dout16),
                               x(q, q16), x(k, k16), x(v, v16), x(o, o16), r.lse.data(),
                               scratch.data());
    r.backward = ops.madds - r.forward;
    if (bf16) o = o16.widened(), dq = dq16.widened(), dk = dk16.widened(), dv = dv16.widened();
    r.o = o.logical(), r.dq = dq.logical(), r.dk = dk.logical(), r.dv = dv.logical();
    return r;
  };
  // Two windows of 256 rows: eight documents of 32 (on chunk edges), and documents of 24, 1, 7,
  // 100 and 124 rows (inside chunks, one of them a single row).
  const int64_t S = 256;
  std::vector<int32_t> ks(size_t(2 * S));
  const std::vector<int64_t> lengths = {24, 1, 7, 100, 124};
  for (int64_t i = 0; i < S; ++i) ks[size_t(i)] = int32_t(i / 32 * 32);
  for (int64_t i = 0, start = 0, d = 0, end = lengths[0]; i < S; ++i) {
    if (i == end) start = end, end += lengths[size_t(++d)];
    ks[size_t(S + i)] = int32_t(start);
  }
  for (bool bf16 : {false, true}) {
    const Run skipped = run(2, S, ks, true, bf16), full = run(2, S, ks, false, bf16);
    expect_bits_eq(skipped.o, full.o, "o");
    expect_bits_eq(skipped.lse, full.lse, "lse");
    expect_bits_eq(skipped.dq, full.dq, "dq");
    expect_bits_eq(skipped.dk, full.dk, "dk");
    expect_bits_eq(skipped.dv, full.dv, "dv");
    // documents on chunk edges: the work of eight sequences of 32 and of the second window's
    // documents run alone from their 16-row blocks
    const Run first = run(1, S, std::vector<int32_t>(ks.begin(), ks.begin() + S), true, bf16);
    const Run alone = run(8, 32, {}, false, bf16);
    EXPECT_EQ(first.forward, alone.forward);
    EXPECT_EQ(first.backward, alone.backward);
    EXPECT_LT(3 * skipped.forward, full.forward);  // 2 x 8 x 48 + ... against 2 x 136 columns
    EXPECT_LT(3 * skipped.backward, full.backward);
  }
}

// bf16: P and dS rounded to bf16 before their products, the outputs rounded once.
TEST(CudaBodies, chunked_attention_in_bf16_is_within_bf16_rounding_of_the_f32_kernels) {
  std::vector<double> worst(4, 0.0);
  for (AttnMask mask : {AttnMask::kCausal, AttnMask::kFull})
    for (const auto& [c, rows] : {std::pair{AttnCase{2, 37, 4, 2, 16}, int64_t(16)},
                                  std::pair{AttnCase{1, 70, 8, 2, 8}, int64_t(32)},
                                  std::pair{AttnCase{1, 300, 2, 1, 64}, int64_t(64)}}) {
      const std::vector<double> e = check_chunked_attention(c, mask, rows, true);
      for (size_t i = 0; i < 4; ++i) worst[i] = std::max(worst[i], e[i]);
    }
  std::printf(
      "chunked bf16 attention, largest error / max|f32|: o %.2e, dq %.2e, dk %.2e, dv %.2e\n",
      worst[0], worst[1], worst[2], worst[3]);
}

TEST(CudaBodies, chunk_rows_keep_the_score_buffers_within_their_budget) {
  for (int64_t S : {1, 15, 16, 17, 1000, 4096, 32768, 131072})
    for (int64_t H : {1, 4, 32, 64}) {
      SCOPED_TRACE(str("S ", S, " H ", H));
      const int64_t rows = chunk_rows(S, H);
      EXPECT_GE(rows, std::min<int64_t>(kChunkAlign, round_up(S, kChunkAlign)));
      EXPECT_LE(rows, round_up(S, kChunkAlign));
      EXPECT_EQ(rows % kChunkAlign, 0);
      const ChunkShape c = chunk_shape(1, S, H, H, 64, true);
      if (rows > kChunkAlign) {
        EXPECT_LE(12 * c.scores_numel(), kChunkScoreBytes);
      }
      if (rows < round_up(S, kChunkAlign)) {  // the budget, not S, bounds the chunk
        EXPECT_GT(12 * H * (rows + kChunkAlign) * round_up(S, kChunkAlign), kChunkScoreBytes);
      }
      EXPECT_EQ(chunked_backward_scratch_numel(c),
                3 * c.scores_numel() + round_up(H * S, 64) + 2 * S * H * 64);
      EXPECT_EQ(chunk_rows(S, H, 40),
                std::min<int64_t>(48, std::max<int64_t>(16, round_up(S, 16))));
    }
}

// The softmax's lane tree: any split of a row into lanes gives the row's max and sum.
TEST(CudaBodies, softmax_lanes_and_tree_give_the_rows_max_and_sum) {
  const std::vector<float> x = test::random_floats(1000, 5, -30.0f, 30.0f);
  for (int64_t n : {1, 2, 255, 256, 257, 1000}) {
    double mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) mx = std::max(mx, double(x[t]));
    double sum = 0.0;
    for (int64_t t = 0; t < n; ++t) sum += std::exp(double(x[t]) - mx);
    std::vector<float> m(kSoftmaxLanes), l(kSoftmaxLanes);
    for (int lane = 0; lane < kSoftmaxLanes; ++lane)
      softmax_lane(x.data(), 0, n, lane, kSoftmaxLanes, m[lane], l[lane]);
    for (int half = kSoftmaxLanes / 2; half > 0; half /= 2)
      for (int lane = 0; lane < half; ++lane) softmax_tree_step(m.data(), l.data(), lane, half);
    EXPECT_EQ(double(m[0]), mx) << n;
    EXPECT_NEAR(l[0], sum, 1e-6 * sum) << n;
  }
}

TEST(CudaBodies, attention_merge_item_matches_cpu_bitwise) {
  constexpr int64_t B = 2, S = 5, H = 3, D = 8, T = B * S;
  const Buf o0 = Buf::random(T, H * D, H * D, 91), o_part = Buf::random(T, H * D, H * D, 92);
  std::vector<float> lse0 = test::random_floats(B * H * S, 93, -3.0f, 3.0f),
                     lse_part = test::random_floats(B * H * S, 94, -3.0f, 3.0f);
  // Rows that saw no key in one part, or in either.
  lse0[1] = -INFINITY;
  lse_part[2] = -INFINITY;
  lse0[3] = lse_part[3] = -INFINITY;
  Buf o_cpu = o0, o_body = o0;
  std::vector<float> lse_cpu = lse0, lse_body = lse0;
  cpu::attention_merge(o_cpu.t(), View<float>(lse_cpu.data(), {B, H, S}), o_part.ct(),
                       View<const float>(lse_part.data(), {B, H, S}));
  for (int64_t bs = 0; bs < T; ++bs)
    for (int64_t h = 0; h < H; ++h)
      attention_merge_item(o_body.mat(), lse_body.data(), o_part.cmat(), lse_part.data(), H, S, D,
                           bs, h);
  // The same float formula (expf, logf) element by element: the same bits.
  expect_bits_eq(o_body, o_cpu, "o");
  expect_bits_eq(lse_body, lse_cpu, "lse");
  EXPECT_EQ(lse_cpu[1], lse_part[1]);
  EXPECT_EQ(lse_cpu[3], -INFINITY);
  EXPECT_NE(lse_cpu[0], lse0[0]);
}

template <int kMaxD>
void check_decode(int64_t first, int64_t n, int64_t H, int64_t Hkv, int64_t D) {
  SCOPED_TRACE(str("first ", first, " n ", n, " H", H, " Hkv", Hkv, " D", D));
  const int64_t keys = first + n;
  const Buf q = Buf::random(n, H * D, H * D, 101, -2.0f, 2.0f),
            k = Buf::random(keys, Hkv * D, Hkv * D, 102, -2.0f, 2.0f),
            v = Buf::random(keys, Hkv * D, Hkv * D, 103);
  Buf o_cpu(n, H * D, H * D, kNaN), o_body(n, H * D, H * D, kNaN);
  std::vector<float> scratch(cpu::attention_decode_scratch_numel(keys));
  cpu::attention_decode(o_cpu.t(), q.ct(), k.ct(), v.ct(), first, H, Hkv,
                        View<float>(scratch.data(), {int64_t(scratch.size())}));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h)
      attention_decode_item<kMaxD>(o_body.mat(), q.cmat(), k.cmat(), v.cmat(), first, H / Hkv, D, i,
                                   h);
  // Online softmax (body) vs a two-pass softmax with a double sum (CPU).
  EXPECT_LE(max_err_vs_max(o_body.logical(), o_cpu.logical()), kAttnTol);
}

TEST(CudaBodies, attention_decode_item_matches_cpu) {
  check_decode<64>(9, 4, 4, 2, 16);
  check_decode<64>(0, 3, 2, 1, 64);
  check_decode<128>(130, 2, 2, 2, 128);
}

// --- optimiser updates: the same float formula per element, so the same bits ---

constexpr int64_t kOptN = 1037;

struct OptState {
  std::vector<float> p, g, s1, s2, s3;
};
OptState opt_state(uint64_t seed) {
  OptState st{test::random_floats(kOptN, seed), test::random_floats(kOptN, seed + 1),
              test::random_floats(kOptN, seed + 2),
              test::random_floats(kOptN, seed + 3, 0.5f, 1.0f),
              test::random_floats(kOptN, seed + 4)};
  st.g[5] = 0.0f;  // sign(0) = 0
  st.g[6] = -0.0f;
  return st;
}
View<float> tv(std::vector<float>& v) { return View<float>(v.data(), {int64_t(v.size())}); }
View<const float> ctv(const std::vector<float>& v) {
  return View<const float>(v.data(), {int64_t(v.size())});
}

TEST(CudaBodies, sgd_elem_matches_cpu_bitwise) {
  struct Case {
    float momentum;
    bool nesterov, first;
  };
  for (Case c : {Case{0.0f, false, false}, Case{0.9f, false, true}, Case{0.9f, false, false},
                 Case{0.9f, true, false}, Case{0.9f, true, true}}) {
    SCOPED_TRACE(str("momentum ", c.momentum, " nesterov ", c.nesterov, " first ", c.first));
    const SgdStep s{0.05f, 0.01f, c.momentum, 0.8f, c.nesterov, c.first};
    const bool mom = c.momentum != 0.0f;
    OptState cpu_st = opt_state(111), body = cpu_st;
    cpu::sgd_update(tv(cpu_st.p), mom ? tv(cpu_st.s1) : View<float>(), ctv(cpu_st.g), s);
    for (int64_t j = 0; j < kOptN; ++j)
      sgd_elem(body.p.data(), mom ? body.s1.data() : nullptr, body.g.data(), s, j);
    expect_bits_eq(body.p, cpu_st.p, "p");
    expect_bits_eq(body.s1, cpu_st.s1, "buf");
    EXPECT_NE(cpu_st.p[0], opt_state(111).p[0]);
  }
}

TEST(CudaBodies, signsgd_elem_matches_cpu_bitwise) {
  for (float momentum : {0.0f, 0.9f}) {
    SCOPED_TRACE(str("momentum ", momentum));
    const SignSgdStep s{0.01f, 1.0f - 0.01f * 0.1f, momentum, float(1.0 - double(momentum))};
    const bool mom = momentum != 0.0f;
    OptState cpu_st = opt_state(121), body = cpu_st;
    cpu::signsgd_update(tv(cpu_st.p), mom ? tv(cpu_st.s1) : View<float>(), ctv(cpu_st.g), s);
    for (int64_t j = 0; j < kOptN; ++j)
      signsgd_elem(body.p.data(), mom ? body.s1.data() : nullptr, body.g.data(), s, j);
    expect_bits_eq(body.p, cpu_st.p, "p");
    expect_bits_eq(body.s1, cpu_st.s1, "m");
  }
}

TEST(CudaBodies, adam_elem_matches_cpu_adam_and_adamw_bitwise) {
  // Both weight_decay and keep set: Adam must use only the first, AdamW only the second.
  AdamStep s;
  s.beta1 = 0.9f;
  s.beta2 = 0.999f;
  s.one_minus_beta1 = float(1.0 - 0.9);
  s.one_minus_beta2 = float(1.0 - 0.999);
  s.eps = 1e-3f;  // large enough to show in every result
  s.step_size = 1e-3f / (1.0f - 0.9f * 0.9f * 0.9f);
  s.bias2_sqrt = std::sqrt(1.0f - 0.999f * 0.999f * 0.999f);
  s.weight_decay = 0.05f;
  s.keep = 1.0f - 1e-3f * 0.1f;
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "adamw" : "adam");
    OptState cpu_st = opt_state(131), body = cpu_st;
    // s2 (in [0.5, 1)) is the second moment v, s1 the first.
    if (decoupled)
      cpu::adamw_update(tv(cpu_st.p), tv(cpu_st.s1), tv(cpu_st.s2), ctv(cpu_st.g), s);
    else
      cpu::adam_update(tv(cpu_st.p), tv(cpu_st.s1), tv(cpu_st.s2), ctv(cpu_st.g), s);
    for (int64_t j = 0; j < kOptN; ++j)
      adam_elem(body.p.data(), body.s1.data(), body.s2.data(), body.g.data(), s, decoupled, j);
    expect_bits_eq(body.p, cpu_st.p, "p");
    expect_bits_eq(body.s1, cpu_st.s1, "m");
    expect_bits_eq(body.s2, cpu_st.s2, "v");
  }
}

TEST(CudaBodies, adagrad_elem_matches_cpu_bitwise) {
  const AdagradStep s{0.01f, 1e-3f, 0.02f};
  OptState cpu_st = opt_state(141), body = cpu_st;
  cpu::adagrad_update(tv(cpu_st.p), tv(cpu_st.s2), ctv(cpu_st.g), s);
  for (int64_t j = 0; j < kOptN; ++j)
    adagrad_elem(body.p.data(), body.s2.data(), body.g.data(), s, j);
  expect_bits_eq(body.p, cpu_st.p, "p");
  expect_bits_eq(body.s2, cpu_st.s2, "sum");
}

TEST(CudaBodies, rmsprop_elem_matches_cpu_bitwise) {
  for (bool centered : {false, true}) {
    for (float momentum : {0.0f, 0.9f}) {
      SCOPED_TRACE(str(centered ? "centered" : "plain", " momentum ", momentum));
      const RmspropStep s{0.01f, 0.9f, 1e-3f, momentum, 0.02f, centered, float(1.0 - 0.9)};
      const bool mom = momentum != 0.0f;
      OptState cpu_st = opt_state(151), body = cpu_st;
      // s2 in [0.5, 1): the square average; s3 scaled to [-0.1, 0.1): the grad average, small
      // enough that the centered variance stays positive.
      for (OptState* st : {&cpu_st, &body})
        for (float& x : st->s3) x *= 0.1f;
      cpu::rmsprop_update(tv(cpu_st.p), tv(cpu_st.s2), centered ? tv(cpu_st.s3) : View<float>(),
                          mom ? tv(cpu_st.s1) : View<float>(), ctv(cpu_st.g), s);
      for (int64_t j = 0; j < kOptN; ++j)
        rmsprop_elem(body.p.data(), body.s2.data(), centered ? body.s3.data() : nullptr,
                     mom ? body.s1.data() : nullptr, body.g.data(), s, j);
      expect_bits_eq(body.p, cpu_st.p, "p");
      expect_bits_eq(body.s2, cpu_st.s2, "square_avg");
      expect_bits_eq(body.s3, cpu_st.s3, "grad_avg");
      expect_bits_eq(body.s1, cpu_st.s1, "buf");
      for (float x : cpu_st.p) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

TEST(CudaBodies, lion_elem_matches_cpu_bitwise) {
  const LionStep s{1e-3f, 0.9f, 0.99f, 1.0f - 1e-3f * 0.1f, float(1.0 - 0.9), float(1.0 - 0.99)};
  OptState cpu_st = opt_state(161), body = cpu_st;
  cpu::lion_update(tv(cpu_st.p), tv(cpu_st.s1), ctv(cpu_st.g), s);
  for (int64_t j = 0; j < kOptN; ++j) lion_elem(body.p.data(), body.s1.data(), body.g.data(), s, j);
  expect_bits_eq(body.p, cpu_st.p, "p");
  expect_bits_eq(body.s1, cpu_st.s1, "m");
}

// --- ordered sums ---

double chunked_sum(CMat x, bool squares) {
  const int64_t n = x.rows * x.cols;
  double total = 0.0;
  for (int64_t k = 0; k < (n + kSumChunk - 1) / kSumChunk; ++k) total += chunk_sum(x, squares, k);
  return total;
}

// Adafactor: the CUDA backend's launch sequence (row and column EMAs, the mean of the row means,
// the inverse factors, the rows' sums of u^2 added in order on the host, the clipped update) run
// with the bodies over every item, against the CPU kernels: the same expressions in the same
// orders, so bit for bit; with and without a first moment and weight decay.
TEST(CudaBodies, adafactor_matrix_and_vector_match_cpu_bitwise) {
  for (const bool first_moment : {false, true}) {
    AdafactorStep s;
    s.beta2t = 0.8f;
    s.one_minus_beta2t = float(1.0 - 0.8);
    s.eps1 = 1e-30f;
    s.alpha = 0.01f;
    s.clip_threshold = 1.0;
    s.beta1 = first_moment ? 0.9f : 0.0f;
    s.one_minus_beta1 = first_moment ? float(1.0 - 0.9) : 1.0f;
    s.keep = first_moment ? 0.999f : 1.0f;
    // matrix [R, C]
    const int64_t R = 13, C = 37;
    const std::vector<float> g = test::random_floats(R * C, 1);
    std::vector<float> p_cpu = test::random_floats(R * C, 2), m_cpu = test::random_floats(R * C, 3);
    std::vector<float> row_cpu = test::random_floats(R, 4, 0.1f, 1.0f);
    std::vector<float> col_cpu = test::random_floats(C, 5, 0.1f, 1.0f);
    std::vector<float> p_gpu = p_cpu, m_gpu = m_cpu, row_gpu = row_cpu, col_gpu = col_cpu;
    std::vector<float> ri(static_cast<size_t>(R)), ci(static_cast<size_t>(C));
    std::vector<double> partial(static_cast<size_t>(R + 1));
    cpu::adafactor_update_matrix(View<float>(p_cpu.data(), {R, C}),
                                 first_moment ? View<float>(m_cpu.data(), {R, C}) : View<float>(),
                                 View<float>(row_cpu.data(), {R}), View<float>(col_cpu.data(), {C}),
                                 View<const float>(g.data(), {R, C}), View<float>(ri.data(), {R}),
                                 View<float>(ci.data(), {C}), View<double>(partial.data(), {R + 1}),
                                 s);
    {
      std::vector<float> gri(static_cast<size_t>(R)), gci(static_cast<size_t>(C));
      std::vector<double> pd(static_cast<size_t>(R + 1));
      for (int64_t r = 0; r < R; ++r)
        adafactor_row(row_gpu.data(), g.data(), C, s.beta2t, s.one_minus_beta2t, s.eps1, r);
      for (int64_t c = 0; c < C; ++c)
        adafactor_col(col_gpu.data(), g.data(), R, C, s.beta2t, s.one_minus_beta2t, s.eps1, c);
      pd[size_t(R)] = adafactor_row_mean(row_gpu.data(), R);
      for (int64_t r = 0; r < R; ++r)
        gri[size_t(r)] = adafactor_inv_row(row_gpu[size_t(r)], pd[size_t(R)]);
      for (int64_t c = 0; c < C; ++c) gci[size_t(c)] = adafactor_inv_col(col_gpu[size_t(c)]);
      double sum = 0.0;
      for (int64_t r = 0; r < R; ++r)
        sum += adafactor_u_row_sq(g.data(), gri.data(), gci.data(), C, r);
      const double rms_u = std::sqrt(sum / double(R * C));
      const float scale = float(s.alpha / std::max(1.0, rms_u / s.clip_threshold));
      for (int64_t j = 0; j < R * C; ++j)
        adafactor_apply(p_gpu.data(), first_moment ? m_gpu.data() : nullptr,
                        scale * (g[size_t(j)] * gri[size_t(j / C)] * gci[size_t(j % C)]), s.beta1,
                        s.one_minus_beta1, s.keep, j);
    }
    EXPECT_EQ(row_gpu, row_cpu);
    EXPECT_EQ(col_gpu, col_cpu);
    EXPECT_EQ(p_gpu, p_cpu) << "first moment " << first_moment;
    if (first_moment) {
      EXPECT_EQ(m_gpu, m_cpu);
    }
    // vector of n (3 chunks and a tail)
    const int64_t n = 3 * kAdafactorChunk + 77;
    const std::vector<float> gv = test::random_floats(n, 6);
    std::vector<float> pv_cpu = test::random_floats(n, 7), mv_cpu = test::random_floats(n, 8);
    std::vector<float> v_cpu = test::random_floats(n, 9, 0.1f, 1.0f);
    std::vector<float> pv_gpu = pv_cpu, mv_gpu = mv_cpu, v_gpu = v_cpu;
    std::vector<double> vpartial(4);
    cpu::adafactor_update_vector(View<float>(pv_cpu.data(), {n}),
                                 first_moment ? View<float>(mv_cpu.data(), {n}) : View<float>(),
                                 View<float>(v_cpu.data(), {n}), View<const float>(gv.data(), {n}),
                                 View<double>(vpartial.data(), {4}), s);
    for (int64_t j = 0; j < n; ++j)
      adafactor_v(v_gpu.data(), gv.data(), s.beta2t, s.one_minus_beta2t, s.eps1, j);
    double sum = 0.0;
    for (int64_t k = 0; k < 4; ++k) sum += adafactor_v_chunk_sq(gv.data(), v_gpu.data(), n, k);
    const double rms_u = std::sqrt(sum / double(n));
    const float scale = float(s.alpha / std::max(1.0, rms_u / s.clip_threshold));
    for (int64_t j = 0; j < n; ++j)
      adafactor_apply(pv_gpu.data(), first_moment ? mv_gpu.data() : nullptr,
                      scale * (gv[size_t(j)] / std::sqrt(v_gpu[size_t(j)])), s.beta1,
                      s.one_minus_beta1, s.keep, j);
    EXPECT_EQ(v_gpu, v_cpu);
    EXPECT_EQ(pv_gpu, pv_cpu) << "first moment " << first_moment;
    if (first_moment) {
      EXPECT_EQ(mv_gpu, mv_cpu);
    }
  }
}

TEST(CudaBodies, chunk_sum_matches_cpu_sum_and_sum_squares) {
  // 1-D of 3 chunks and a tail; a 2-D strided view (which the CPU sums from a contiguous copy);
  // one partial chunk.
  for (const Shape2& s : {Shape2{1, 3 * kSumChunk + 123, 3 * kSumChunk + 123}, Shape2{97, 131, 140},
                          Shape2{1, 1000, 1000}}) {
    const auto [R, C, ld] = s;
    SCOPED_TRACE(name(s));
    const Buf x = Buf::random(R, C, ld, 171, -1.0f, 3.0f);
    const std::vector<float> xc = x.logical();
    const View<const float> xt(xc.data(), {R * C});
    double abs_sum = 0.0, sq_sum = 0.0;
    for (float e : xc) abs_sum += std::abs(double(e)), sq_sum += double(e) * e;
    const double sum_body = chunked_sum(x.cmat(), false), sq_body = chunked_sum(x.cmat(), true);
    const double sum_cpu = cpu::sum(xt), sq_cpu = cpu::sum_squares(xt);
    if (R * C <= kSumChunk) {
      // One chunk, summed in index order in double on both sides: the same bits.
      EXPECT_EQ(sum_body, sum_cpu);
      EXPECT_EQ(sq_body, sq_cpu);
    }
    // Otherwise the chunk sums associate differently from the CPU's (one serial sum; chunks of
    // 2^14 for squares): double roundings of n terms, <= n 2^-53 of the absolute sum.
    EXPECT_LE(std::abs(sum_body - sum_cpu), 1e-12 * abs_sum);
    EXPECT_LE(std::abs(sq_body - sq_cpu), 1e-12 * sq_sum);
    EXPECT_GT(std::abs(sum_cpu), 1.0);
  }
}

TEST(CudaBodies, noise_probe_chunk_matches_cpu_pass_bitwise) {
  // Two full chunks and a tail whose length is not a multiple of the 8 lanes.
  const int64_t n = 2 * kNoiseProbeChunk + 77,
                chunks = (n + kNoiseProbeChunk - 1) / kNoiseProbeChunk;
  ASSERT_EQ(chunks, cpu::noise_probe_chunks(n));
  std::vector<float> sum_cpu = nan_vec(n), sum_body = nan_vec(n);  // pass 0 overwrites sum
  std::vector<double> partial(chunks);
  const NoiseProbePass passes[] = {NoiseProbePass::kFirst, NoiseProbePass::kMiddle,
                                   NoiseProbePass::kMiddle, NoiseProbePass::kLast};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(str("micro-batch ", step));
    const NoiseProbePass pass = passes[step];
    const std::vector<float> g = test::random_floats(n, 181 + step);
    std::vector<float> g_cpu = g, g_body = g;
    std::fill(partial.begin(), partial.end(), std::numeric_limits<double>::quiet_NaN());
    const double total_cpu =
        cpu::noise_probe_pass(tv(g_cpu), tv(sum_cpu), pass, View<double>(partial.data(), {chunks}));
    double total_body = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      const double part = noise_probe_chunk(g_body.data(), sum_body.data(), int(pass), n, k);
      EXPECT_EQ(part, partial[k]) << "chunk " << k;
      total_body += part;
    }
    EXPECT_EQ(total_body, total_cpu);
    EXPECT_GT(total_cpu, 0.0);
    expect_bits_eq(g_body, g_cpu, "g");
    expect_bits_eq(sum_body, sum_cpu, "sum");
  }
}

}  // namespace
}  // namespace memo::cuda
