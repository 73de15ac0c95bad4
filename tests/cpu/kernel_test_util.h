// Helpers for the kernel tests: seeded random fills, float <-> double copies, and the error
// measures the tolerances are stated in. Header-only; tests only.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace memo::test {

// Unit roundoff of float: the relative error of one correctly rounded fp32 operation.
inline constexpr double kFloatU = 0x1p-24;

// Uniform floats in [lo, hi) from a fixed seed (mt19937_64 is specified bit for bit by the
// standard; the distribution is libstdc++'s, fixed for a toolchain).
inline std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_ids(int64_t n, int32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// max_i |got_i - want_i| / scale_i: the error in units of a per-element magnitude (a sum of
// absolute terms, so cancellation in want does not inflate the ratio).
inline double max_scaled_err(const std::vector<float>& got, const std::vector<double>& want,
                             const std::vector<double>& scale) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    worst = std::max(worst, scale[i] > 0.0 ? err / scale[i] : (err > 0.0 ? INFINITY : 0.0));
  }
  return worst;
}

// max_i |got_i - want_i| / max(|want_i|, floor)
inline double max_rel_err(const std::vector<float>& got, const std::vector<double>& want,
                          double floor = 0.0) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    const double den = std::max(std::abs(want[i]), floor);
    worst = std::max(worst, den > 0.0 ? err / den : (err > 0.0 ? INFINITY : 0.0));
  }
  return worst;
}

// Central finite differences of a scalar function of x, in double: g_i = (L(x + h e_i) -
// L(x - h e_i)) / 2h with h relative to |x_i|. Truncation error is O(h^2 L^(3)), roundoff
// O(eps |L| / h); h = 1e-5 balances them near 1e-10 for the smooth, O(1) losses the tests use.
template <class Loss>
std::vector<double> finite_diff_grad(std::vector<double> x, const Loss& loss, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], step = h * std::max(1.0, std::abs(xi));
    x[i] = xi + step;
    const double up = loss(x);
    x[i] = xi - step;
    const double down = loss(x);
    x[i] = xi;
    g[i] = (up - down) / (2.0 * step);
  }
  return g;
}

// max_i |a_i - b_i| / (1 + |b_i|): for comparing gradients of O(1) losses.
inline double max_grad_err(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
  return worst;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Runs f with n OpenMP threads, then restores the previous count.
template <class F>
void with_threads(int n, const F& f) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(old);
}

// f with MEMO_CPU_ISA=cap (as the environment has it where cap is empty), restored after.
template <class F>
void with_isa_cap(const std::string& cap, const F& f) {
  if (cap.empty()) return f();
  const char* old = std::getenv("MEMO_CPU_ISA");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("MEMO_CPU_ISA", cap.c_str(), 1);
  f();
  if (old == nullptr)
    ::unsetenv("MEMO_CPU_ISA");
  else
    ::setenv("MEMO_CPU_ISA", saved.c_str(), 1);
}

// Shapes every row-wise kernel test runs: 1, primes, and sizes that are not multiples of the
// 8- or 16-float vector width, plus one large enough to take the multi-threaded path.
struct RowShape {
  int64_t rows, cols;
};
inline const std::vector<RowShape>& awkward_shapes() {
  static const std::vector<RowShape> shapes = {{1, 1},  {1, 7},  {7, 13},  {13, 97},
                                               {3, 16}, {5, 33}, {97, 31}, {67, 257}};
  return shapes;
}

}  // namespace memo::test
