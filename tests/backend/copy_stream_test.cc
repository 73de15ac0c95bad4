// Copy streams and events: copies run in queue order, an event covers every copy before it, the
// destructor finishes queued work, the throttle's lower bound, random delays that change no data,
// and "stream waits on event" ordering one stream after another without blocking the host. No
// test depends on timing beyond a sleep's lower bound.
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
  e.synchronize();
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
    events[size_t(i)].synchronize();
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

// The second stream's copy reads what the first stream's copy wrote, ordered only by
// b.wait(a.record()): the host never blocks between them, and the random delays on a make a
// missing wait show up as a stale value.
TEST(CopyStream, stream_waits_on_another_streams_event_without_blocking_the_host) {
  CopyStream a("d2h", {.max_random_delay_s = 0.003, .random_delay_seed = 5});
  CopyStream b("h2d", {});
  for (int round = 0; round < 20; ++round) {
    std::vector<int> src(4096, round), mid(4096, -1), dst(4096, -2);
    a.copy(mid.data(), src.data(), int64_t(mid.size() * sizeof(int)));
    const Event written = a.record();
    b.wait(written);  // returns at once; b's worker waits
    b.copy(dst.data(), mid.data(), int64_t(dst.size() * sizeof(int)));
    b.synchronize();
    EXPECT_TRUE(written.done());
    EXPECT_EQ(dst, src) << "round " << round;
  }
}

TEST(HostStream, runs_copies_at_once_and_its_events_are_complete) {
  HostStream s("compute");
  std::vector<int> src(100, 3), dst(100, 0);
  s.copy(dst.data(), src.data(), int64_t(src.size() * sizeof(int)));
  EXPECT_EQ(dst, src);
  EXPECT_TRUE(s.record().done());
  EXPECT_EQ(s.copied_bytes(), int64_t(src.size() * sizeof(int)));
  CopyStream other("d2h", {.max_random_delay_s = 0.002});
  std::vector<int> late(100, 0);
  other.copy(late.data(), src.data(), int64_t(src.size() * sizeof(int)));
  s.wait(other.record());  // the host is this stream: it waits here
  EXPECT_EQ(late, src);
}

TEST(CopyStream, rejects_negative_options_and_sizes) {
  const StreamOptions negative{.bandwidth_bytes_per_s = -1.0};
  EXPECT_THROW(CopyStream("x", negative), Error);
  CopyStream s("x", {});
  EXPECT_THROW(s.copy(nullptr, nullptr, -4), Error);
}

}  // namespace
}  // namespace memo
