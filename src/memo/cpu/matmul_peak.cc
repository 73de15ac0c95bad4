// Peak sgemm rate through memo::cpu::matmul (see matmul_peak.h). Best of several calls, because
// the maximum is the least disturbed by other processes sharing the cores.
#include "memo/cpu/matmul_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "memo/cpu/kernels.h"

namespace memo::cpu {

namespace {

constexpr int64_t kN = 2048;  // large enough for full-speed blocking, ~0.1 s an f32 call here

// The best rate of `product` (one n^3 product a call) over about `seconds`.
template <class F>
double best_rate(double seconds, F&& product) {
  using Clock = std::chrono::steady_clock;
  constexpr int kMinTimedCalls = 2;
  product();  // warm-up: thread pools, JIT kernels, page faults
  const double flop = 2.0 * double(kN) * double(kN) * double(kN);
  double best_s = 1e300;
  const auto start = Clock::now();
  for (int calls = 0;; ++calls) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (calls >= kMinTimedCalls && elapsed >= seconds) break;
    const auto t0 = Clock::now();
    product();
    best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return flop / best_s;
}

}  // namespace

double measure_matmul_peak_flops(double seconds) {
  std::vector<float> a(kN * kN), b(kN * kN), c(kN * kN);
  for (int64_t i = 0; i < kN * kN; ++i) {
    a[i] = float(i % 7) * 0.25f - 0.75f;  // small exact values: no denormals, no overflow
    b[i] = float(i % 5) * 0.5f - 1.0f;
  }
  Tensor cv(c.data(), {kN, kN});
  ConstTensor av(a.data(), {kN, kN}), bv(b.data(), {kN, kN});
  return best_rate(seconds, [&] { matmul(cv, av, bv, false, false); });
}

double measure_bf16_matmul_peak_flops(double seconds) {
  std::vector<bf16> a(kN * kN), b(kN * kN);
  std::vector<float> c(kN * kN);
  for (int64_t i = 0; i < kN * kN; ++i) {
    a[i] = float_to_bf16(float(i % 7) * 0.25f - 0.75f);  // exact in bf16
    b[i] = float_to_bf16(float(i % 5) * 0.5f - 1.0f);
  }
  const memo::Tensor cv(View<float>(c.data(), {kN, kN}));
  const memo::ConstTensor av(View<const bf16>(a.data(), {kN, kN})),
      bv(View<const bf16>(b.data(), {kN, kN}));
  // b transposed: the layout of the model's per-token products (weights [out, in])
  return best_rate(seconds, [&] { matmul_bf16(cv, av, bv, false, true); });
}

}  // namespace memo::cpu
