// The budgeted memory space: live and peak bytes, buffers returning their bytes when destroyed or
// moved over, and a refusal past the budget that names the space, the request and the shortfall.
#include "memo/backend/memory_space.h"

#include <gtest/gtest.h>

#include <utility>

#include "memo/core/error.h"
#include "test_util.h"

namespace memo {
namespace {

TEST(MemorySpace, tracks_live_and_peak_bytes) {
  MemorySpace host("host", 0, default_host_allocator());
  {
    SpaceBuffer a = host.allocate("a", 1000);  // rounded to 1024
    EXPECT_EQ(a.bytes(), 1024);
    SpaceBuffer b = host.allocate("b", 64);
    EXPECT_EQ(host.live_bytes(), 1088);
    SpaceBuffer c = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(host.live_bytes(), 1088);
    b = host.allocate("b2", 128);  // the old b is given back
    EXPECT_EQ(host.live_bytes(), 1024 + 128);
  }
  EXPECT_EQ(host.live_bytes(), 0);
  EXPECT_EQ(host.peak_bytes(), 1024 + 64 + 128);
  host.reset_peak();
  EXPECT_EQ(host.peak_bytes(), 0);
}

TEST(MemorySpace, over_budget_names_space_request_and_shortfall) {
  MemorySpace host("host", 1 << 20, default_host_allocator());
  SpaceBuffer a = host.allocate("first", 1 << 19);
  const std::string msg =
      test::error_message<BudgetError>([&] { host.allocate("the offload of layer 3", 1 << 20); });
  EXPECT_NE(msg.find("host memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the offload of layer 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("short 512.00 KiB"), std::string::npos) << msg;  // not "0.00 GiB"
  EXPECT_EQ(gib(1 << 19), "512.00 KiB");
  EXPECT_EQ(gib(3.0 * (1 << 20)), "3.00 MiB");
  EXPECT_EQ(gib(96), "96 B");
  EXPECT_EQ(gib(0), "0.00 GiB");
  EXPECT_EQ(gib(41.3 * (1 << 30)), "41.30 GiB");
  EXPECT_EQ(host.live_bytes(), 1 << 19);  // nothing taken by the refused request
}

}  // namespace
}  // namespace memo
