// The closed form for alpha (memory/alpha.h) on hand-computed cases: each constraint
// binding, neither binding, the L <= 2 case, and the infeasible cases with their advice.
#include "memo/memory/alpha.h"

#include <gtest/gtest.h>

#include <cmath>

namespace memo {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// S_in = S_attn = 1 MiB, S_oth = 14 MiB per layer, L = 10 (8 offloaded), seq 1000.
AlphaInputs base() {
  AlphaInputs in;
  in.input_bytes = kMiB;
  in.attn_bytes = kMiB;
  in.other_bytes = 14 * kMiB;
  in.num_layers = 10;
  in.seq = 1000;
  return in;
}

TEST(ChooseAlpha, host_memory_binds) {
  AlphaInputs in = base();
  in.host_memory_bytes = 8 * 9 * kMiB;  // per layer 9 MiB: alpha = (9 - 2) / 14 = 0.5
  in.layer_forward_s = 1.0;
  in.bandwidth_bytes_per_s = 1e12;  // bandwidth bound far above 1
  const AlphaChoice c = choose_alpha(in);
  EXPECT_DOUBLE_EQ(c.alpha, 0.5);
  EXPECT_EQ(c.binding, AlphaBound::kHostMemory);
  EXPECT_TRUE(c.host_fits && c.copy_hidden);
  EXPECT_DOUBLE_EQ(host_bytes_at(in, c.alpha), double(in.host_memory_bytes));
}

TEST(ChooseAlpha, bandwidth_binds) {
  AlphaInputs in = base();
  in.layer_forward_s = 0.01;
  in.bandwidth_bytes_per_s = 9.0 * double(kMiB) / 0.01;  // 9 MiB per layer forward: alpha 0.5
  const AlphaChoice c = choose_alpha(in);                // host unlimited
  EXPECT_DOUBLE_EQ(c.alpha, 0.5);
  EXPECT_EQ(c.binding, AlphaBound::kBandwidth);
  EXPECT_TRUE(std::isinf(c.alpha_host));
}

TEST(ChooseAlpha, the_tighter_of_two_bounds_wins) {
  AlphaInputs in = base();
  in.layer_forward_s = 0.01;
  in.bandwidth_bytes_per_s = 5.5 * double(kMiB) / 0.01;  // (5.5 - 2) / 14 = 0.25
  in.host_memory_bytes = 8 * 9 * kMiB;                   // 0.5
  const AlphaChoice c = choose_alpha(in);
  EXPECT_DOUBLE_EQ(c.alpha, 0.25);
  EXPECT_EQ(c.binding, AlphaBound::kBandwidth);
  EXPECT_DOUBLE_EQ(c.alpha_host, 0.5);
}

TEST(ChooseAlpha, nothing_binds_gives_one) {
  AlphaInputs in = base();
  in.layer_forward_s = 1.0;
  in.bandwidth_bytes_per_s = 1e12;
  in.host_memory_bytes = 8 * 100 * kMiB;
  const AlphaChoice c = choose_alpha(in);
  EXPECT_EQ(c.alpha, 1.0);
  EXPECT_EQ(c.binding, AlphaBound::kNone);
}

TEST(ChooseAlpha, two_layers_never_offload) {
  AlphaInputs in = base();
  in.num_layers = 2;
  in.host_memory_bytes = 1;  // would not hold anything, but nothing is offloaded
  const AlphaChoice c = choose_alpha(in);
  EXPECT_EQ(c.alpha, 1.0);
  EXPECT_TRUE(c.host_fits);
  EXPECT_EQ(host_bytes_at(in, 1.0), 0.0);
}

TEST(ChooseAlpha, host_too_small_for_alpha_zero_says_what_fits) {
  AlphaInputs in = base();
  in.host_memory_bytes = 8 * kMiB;  // needs 8 x 2 MiB = 16 MiB even at alpha 0
  const AlphaChoice c = choose_alpha(in);
  EXPECT_FALSE(c.host_fits);
  EXPECT_EQ(c.alpha, 0.0);
  EXPECT_DOUBLE_EQ(c.alpha_host, (1.0 - 2.0) / 14.0);
  EXPECT_NE(c.advice.find("short 8.00 MiB"), std::string::npos) << c.advice;
  EXPECT_NE(c.advice.find("--seq 500"), std::string::npos) << c.advice;  // half the tokens
  EXPECT_NE(c.advice.find("--host-memory 16MiB would fit"), std::string::npos) << c.advice;
  // a budget that no sequence fits suggests no --seq 0
  in.host_memory_bytes = 1024;
  const AlphaChoice none = choose_alpha(in);
  EXPECT_EQ(none.advice.find("--seq"), std::string::npos) << none.advice;
  EXPECT_NE(none.advice.find("--host-memory 16MiB would fit"), std::string::npos) << none.advice;
}

TEST(ChooseAlpha, copy_slower_than_forward_even_at_zero_warns_with_bandwidth_needed) {
  AlphaInputs in = base();
  in.layer_forward_s = 0.01;
  in.bandwidth_bytes_per_s = 1.0 * double(kMiB) / 0.01;  // needs 2 MiB per 10 ms
  const AlphaChoice c = choose_alpha(in);
  EXPECT_TRUE(c.host_fits);
  EXPECT_FALSE(c.copy_hidden);
  EXPECT_EQ(c.alpha, 0.0);
  EXPECT_EQ(c.binding, AlphaBound::kBandwidth);
  EXPECT_NE(c.advice.find("0.20971"), std::string::npos) << c.advice;  // 2 MiB / 10 ms in GB/s
}

}  // namespace
}  // namespace memo
