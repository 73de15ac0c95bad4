// Copy streams and events: copies run in queue order, an event covers every copy before it, the
// destructor finishes queued work, the throttle's lower bound, and random delays that change no
// data. No test depends on timing beyond a sleep's lower bound.
#include "memo/backend/copy_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "memo/core/error.h"

namespace memo {
namespace {

TEST(Event, default_event_is_complete) {
  Event e;
  EXPECT_TRUE(e.done());
  e.wait();
}

TEST(CopyStream, event_completes_after_every_copy_queued_before_it) {
  CopyStream s("d2h", {.max_random_delay_s = 0.002, .random_delay_seed = 3});
  const int n = 20;
  std::vector<std::vector<int>> src(n, std::vector<int>(1000)), dst(n, std::vector<int>(1000, -1));
  std::vector<Event> events;
  for (int i = 0; i < n; ++i) {
    std::iota(src[i].begin(), src[i].end(), i * 1000);
    s.copy(dst[i].data(), src[i].data(), int64_t(src[i].size() * sizeof(int)));
    events.push_back(s.record());
  }
  for (int i = n - 1; i >= 0; --i) {  // waiting on a late event implies the earlier ones
    events[size_t(i)].wait();
    EXPECT_TRUE(events[size_t(i)].done());
    for (int j = 0; j <= i; ++j) EXPECT_TRUE(events[size_t(j)].done()) << i << " " << j;
    EXPECT_EQ(dst[size_t(i)], src[size_t(i)]);
  }
  EXPECT_EQ(s.copied_bytes(), int64_t(n * 1000 * sizeof(int)));
}

TEST(CopyStream, copies_into_one_buffer_apply_in_queue_order) {
  CopyStream s("h2d", {.max_random_delay_s = 0.001, .random_delay_seed = 9});
  std::vector<std::vector<float>> src(10, std::vector<float>(64));
  for (int i = 0; i < 10; ++i) std::fill(src[size_t(i)].begin(), src[size_t(i)].end(), float(i));
  std::vector<float> dst(64, -1.0f);
  for (auto& v : src) s.copy(dst.data(), v.data(), 64 * sizeof(float));
  s.synchronize();
  EXPECT_EQ(dst, src.back());
}

TEST(CopyStream, destructor_finishes_queued_copies) {
  std::vector<char> src(1 << 16, 7), dst(1 << 16, 0);
  {
    CopyStream s("d2h", {.max_random_delay_s = 0.005});
    s.copy(dst.data(), src.data(), int64_t(src.size()));
  }
  EXPECT_EQ(dst, src);
}

TEST(CopyStream, throttled_copy_takes_at_least_bytes_over_bandwidth) {
  const int64_t bytes = 1 << 20;
  std::vector<char> src(size_t(bytes), 1), dst(size_t(bytes), 0);
  CopyStream s("d2h", {.bandwidth_bytes_per_s = 100e6});  // 1 MiB at 100 MB/s: >= 10.5 ms
  const auto t0 = std::chrono::steady_clock::now();
  s.copy(dst.data(), src.data(), bytes);
  s.synchronize();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(elapsed, double(bytes) / 100e6);
  EXPECT_GE(s.busy_s(), double(bytes) / 100e6);
  EXPECT_LE(double(s.copied_bytes()) / s.busy_s(),
            100e6);  // measured bandwidth honours the cap
}

TEST(CopyStream, rejects_negative_options_and_sizes) {
  const CopyStreamOptions negative{.bandwidth_bytes_per_s = -1.0};
  EXPECT_THROW(CopyStream("x", negative), Error);
  CopyStream s("x", {});
  EXPECT_THROW(s.copy(nullptr, nullptr, -4), Error);
}

}  // namespace
}  // namespace memo
