#include "memo/data/sampler.h"

#include <gtest/gtest.h>

#include <numeric>

#include "memo/core/error.h"
#include "test_util.h"

namespace memo {
namespace {

using test::error_message;

TokenData iota_tokens(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 0);
  return TokenData(std::move(tokens), "iota.bin", n);
}

TEST(WindowSampler, same_coordinates_give_same_windows_across_instances) {
  TokenData data = iota_tokens(1000);
  constexpr int64_t kSeq = 16, kBatch = 4;
  std::vector<int32_t> x1(kSeq * kBatch), y1(kSeq * kBatch), x2(kSeq * kBatch), y2(kSeq * kBatch);
  WindowSampler a(data, kSeq, 42), b(data, kSeq, 42), c(data, kSeq, 43);
  a.fill(7, 1, x1.data(), y1.data(), kBatch);
  b.fill(7, 1, x2.data(), y2.data(), kBatch);  // as after a resume at step 7
  EXPECT_EQ(x1, x2);
  EXPECT_EQ(y1, y2);
  c.fill(7, 1, x2.data(), y2.data(), kBatch);
  EXPECT_NE(x1, x2);
  a.fill(7, 0, x2.data(), y2.data(), kBatch);
  EXPECT_NE(x1, x2);
  for (int64_t r = 0; r < kBatch; ++r) {  // targets are inputs shifted by one token
    EXPECT_EQ(x1[size_t(r * kSeq)], a.window_start(7, 1, r));
    for (int64_t t = 0; t < kSeq; ++t)
      EXPECT_EQ(y1[size_t(r * kSeq + t)], x1[size_t(r * kSeq + t)] + 1);
  }
}

// Pins Note [Counter-based sampling]: a change here silently changes every run's data order.
// The values were computed independently in Python from the formula in the Note.
TEST(WindowSampler, golden_window_starts) {
  TokenData data = iota_tokens(1 << 20);
  WindowSampler s(data, 128, 1234);
  EXPECT_EQ(s.window_start(0, 0, 0), 314122);
  EXPECT_EQ(s.window_start(1000, 3, 5), 434269);
}

TEST(WindowSampler, starts_cover_the_whole_range_uniformly) {
  constexpr int64_t kSeq = 8, kStarts = 5;  // starts 0 .. 4
  TokenData data = iota_tokens(kSeq + kStarts);
  WindowSampler s(data, kSeq, 9);
  std::vector<int> hits(kStarts, 0);
  constexpr int kDraws = 5000;
  for (int64_t step = 0; step < kDraws; ++step) {
    int64_t start = s.window_start(step, 0, 0);
    ASSERT_GE(start, 0);
    ASSERT_LT(start, kStarts);
    ++hits[size_t(start)];
  }
  // Each count is Binomial(5000, 0.2): mean 1000, sd 28; 850 is over 5 sd away.
  for (int h : hits) EXPECT_GT(h, 850);
}

TEST(WindowSampler, exactly_seq_plus_one_tokens_gives_the_whole_file) {
  TokenData data = iota_tokens(9);
  WindowSampler s(data, 8, 1);
  std::vector<int32_t> x(16), y(16);
  s.fill(3, 0, x.data(), y.data(), 2);
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(x[size_t(t)], t);
    EXPECT_EQ(y[size_t(8 + t)], t + 1);
  }
  EXPECT_EQ(s.num_sequential_windows(), 1);
}

TEST(WindowSampler, too_short_data_names_source_count_and_need) {
  TokenData data = iota_tokens(8);
  std::string msg = error_message<DataError>([&] { WindowSampler s(data, 8, 1); });
  EXPECT_EQ(msg,
            "iota.bin holds 8 tokens; a window of seq = 8 needs 9 (inputs plus the next-token "
            "target)");
  msg = error_message<ConfigError>([&] { WindowSampler s(data, 0, 1); });
  EXPECT_NE(msg.find("sequence length 0"), std::string::npos) << msg;
}

TEST(WindowSampler, sequential_windows_run_in_order) {
  TokenData data = iota_tokens(30);
  WindowSampler s(data, 4, 1);
  EXPECT_EQ(s.num_sequential_windows(), 7);  // window 6 covers inputs 24..27, target up to 28
  std::vector<int32_t> x(8), y(8);
  s.fill_sequential(5, x.data(), y.data(), 2);
  EXPECT_EQ(x, (std::vector<int32_t>{20, 21, 22, 23, 24, 25, 26, 27}));
  EXPECT_EQ(y, (std::vector<int32_t>{21, 22, 23, 24, 25, 26, 27, 28}));
  std::string msg = error_message<DataError>([&] { s.fill_sequential(6, x.data(), y.data(), 2); });
  EXPECT_NE(msg.find("windows [6, 8) of iota.bin are outside its 7 sequential windows"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace memo
