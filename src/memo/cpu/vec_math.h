// Branch-free float exp for loops under `#pragma omp simd`: glibc's expf does not vectorise
// without -ffast-math, which memo does not use. Not correctly rounded: relative error within
// 3 ulp of exp in double (tests/cpu/vec_math_test.cc), deterministic for a given build.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace memo::cpu {

// exp(x) = 2^n * exp(r), n = round(x log2 e), |r| <= ln 2 / 2; exp(r) by its Taylor series to
// degree 7, whose truncation error (ln2/2)^8 / 8! < 5e-9 is below half an ulp.
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 split in two so that n * kLn2Hi is exact for |n| <= 2^8 (kLn2Hi has 10 mantissa bits).
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  // Above kMaxArg exp overflows to +inf. Below kMinArg the result (< 1.8e-38, near the smallest
  // normal float) is returned as 0: 2^(n-1) must stay a normal float.
  constexpr float kMaxArg = 88.7228394f;
  constexpr float kMinArg = -86.9f;
  // Comparisons with NaN are false, so a NaN input flows through and the result is NaN.
  float xc = x < kMinArg ? kMinArg : x;
  xc = xc > kMaxArg ? kMaxArg : xc;
  // n = round(xc * log2 e) by the shift trick: adding 1.5 * 2^23 leaves no fraction bits, so the
  // sum is rounded to an integer (std::floor would be a libm call that blocks vectorisation).
  constexpr float kRoundShift = 12582912.0f;
  const float n = (xc * kLog2e + kRoundShift) - kRoundShift;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n = 2 * 2^(n-1): n reaches 128 near kMaxArg, where 2^n alone is not a finite float. p * 2
  // is exact, and the product with 2^(n-1) overflows to +inf exactly when exp itself does.
  const float scale = std::bit_cast<float>((int32_t(n) + 126) << 23);
  float y = (p * 2.0f) * scale;
  y = x > kMaxArg ? std::numeric_limits<float>::infinity() : y;
  y = x < kMinArg ? 0.0f : y;
  return y;
}

}  // namespace memo::cpu
