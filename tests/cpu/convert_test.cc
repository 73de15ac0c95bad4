// f32 <-> bf16: the rounding of core/dtype.h against a float64 reference, and Backend::convert on
// the CPU and meta backends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "memo/core/dtype.h"
#include "memo/cpu/cpu_backend.h"
#include "memo/meta/meta_backend.h"
#include "test_util.h"

namespace memo {
namespace {

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The bf16 value nearest x in float64, ties to the even mantissa; an overflow past the largest
// bf16 by half an ulp or more is infinity (IEEE round to nearest).
double nearest_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t down = u & 0xffff0000u, up = down + 0x10000u;  // same sign, truncated and next
  const double lo = bits_to_float(down), hi = bits_to_float(up);
  // past the largest finite value the next step is 2^128 in magnitude, which rounds to infinity
  const double hi_at = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), hi) : hi;
  const double dl = std::abs(double(x) - lo), dh = std::abs(hi_at - double(x));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return ((down >> 16) & 1u) == 0 ? lo : hi;
}

TEST(Bf16, rounds_to_the_nearest_even_value_as_float64_says) {
  std::mt19937 rng(7);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           3.14159265f,
                           1e-40f,
                           -1e-45f,
                           65504.0f,
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  // exact ties: the 16 dropped bits are 0x8000, above an even and an odd kept mantissa
  xs.push_back(bits_to_float(0x3f808000u));  // tie, even below: rounds down
  xs.push_back(bits_to_float(0x3f818000u));  // tie, odd below: rounds up
  for (int i = 0; i < 200000; ++i) xs.push_back(bits_to_float(uint32_t(rng())));
  for (float x : xs) {
    if (std::isnan(x)) continue;
    const float got = bf16_to_float(float_to_bf16(x));
    EXPECT_EQ(double(got), nearest_bf16(x)) << x;
    EXPECT_EQ(std::signbit(got), std::signbit(x)) << x;
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(bits_to_float(0x3f808000u))), bits_to_float(0x3f800000u));
  EXPECT_EQ(bf16_to_float(float_to_bf16(bits_to_float(0x3f818000u))), bits_to_float(0x3f820000u));
  // a NaN stays a NaN, whatever its payload (a payload in the dropped bits only included)
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu})
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_to_float(nan))))) << std::hex << nan;
}

TEST(CpuBackend, convert_rounds_f32_to_bf16_and_back_exactly) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 10.0f);
  const int64_t n = 70000;  // over the parallel threshold
  std::vector<float> x(n), back(n);
  for (float& v : x) v = d(rng);
  std::vector<bf16> b(n), b2(n);
  Backend& be = cpu_backend();
  be.convert(Tensor(View<bf16>(b.data(), {n})), View<const float>(x.data(), {n}));
  be.convert(View<float>(back.data(), {n}), ConstTensor(View<const bf16>(b.data(), {n})));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[size_t(i)].bits, float_to_bf16(x[size_t(i)]).bits) << i;
    ASSERT_EQ(back[size_t(i)], bf16_to_float(b[size_t(i)])) << i;
  }
  // bf16 to bf16 copies; f32 to f32 copies, in any shape of one element count
  be.convert(Tensor(View<bf16>(b2.data(), {n})), ConstTensor(View<const bf16>(b.data(), {n})));
  EXPECT_EQ(0, std::memcmp(b.data(), b2.data(), b.size() * sizeof(bf16)));
  std::vector<float> y(n);
  be.convert(View<float>(y.data(), {n / 2, 2}), View<const float>(back.data(), {n}));
  EXPECT_EQ(0, std::memcmp(y.data(), back.data(), y.size() * sizeof(float)));
}

TEST(Backends, convert_refuses_other_dtypes_and_lengths_alike_on_cpu_and_meta) {
  MetaBackend meta(cpu_backend());
  std::vector<float> x(8);
  std::vector<bf16> b(8);
  uint16_t h[8] = {};
  for (Backend* be : {static_cast<Backend*>(&cpu_backend()), static_cast<Backend*>(&meta)}) {
    const std::string wrong_length = test::error_message<Error>(
        [&] { be->convert(Tensor(View<bf16>(b.data(), {7})), View<const float>(x.data(), {8})); });
    EXPECT_NE(wrong_length.find("one element count"), std::string::npos) << wrong_length;
    const std::string f16 = test::error_message<Error>([&] {
      be->convert(Tensor(h, {8}, DType::kF16, MemSpace::kHost), View<const float>(x.data(), {8}));
    });
    EXPECT_NE(f16.find("f32 to f16: memo converts between f32 and bf16"), std::string::npos) << f16;
  }
}

}  // namespace
}  // namespace memo
