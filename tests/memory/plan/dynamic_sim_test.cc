#include "memo/memory/plan/dynamic_sim.h"

#include <gtest/gtest.h>

#include "memo/memory/plan/heuristic.h"

namespace memo::plan {
namespace {
constexpr Bytes kMiB = 1024 * 1024;
}

TEST(PlanDynamicSim, rounds_small_requests_and_carves_them_from_one_2mib_segment) {
  DynamicAllocatorSim sim;
  const auto a = sim.allocate(1);     // 512 B
  const auto b = sim.allocate(1000);  // 1024 B
  EXPECT_EQ(sim.allocated_bytes(), 512 + 1024);
  EXPECT_EQ(sim.reserved_bytes(), 2 * kMiB);
  sim.release(a);
  sim.release(b);
  EXPECT_EQ(sim.allocated_bytes(), 0);
  EXPECT_EQ(sim.reserved_bytes(), 2 * kMiB);  // cached, not returned
  EXPECT_EQ(sim.stats().segments_created, 1);
}

TEST(PlanDynamicSim, large_request_segments_follow_pytorch_sizes) {
  DynamicAllocatorSim sim;
  sim.allocate(3 * kMiB);  // under 10 MiB: a 20 MiB segment, split (the rest > 1 MiB stays cached)
  EXPECT_EQ(sim.reserved_bytes(), 20 * kMiB);
  EXPECT_EQ(sim.allocated_bytes(), 3 * kMiB);
  sim.allocate(11 * kMiB + 1);  // the cached 17 MiB rest of that segment fits it
  EXPECT_EQ(sim.reserved_bytes(), 20 * kMiB);
  sim.allocate(25 * kMiB + 100);  // rounds its own segment up to 26 MiB
  EXPECT_EQ(sim.reserved_bytes(), 46 * kMiB);
}

TEST(PlanDynamicSim, unsplit_remainder_counts_as_allocated) {
  DynamicAllocatorSim sim;
  const auto a = sim.allocate(12 * kMiB);  // 12 MiB segment, exact
  sim.release(a);
  sim.allocate(11 * kMiB + 512 * 1024);  // fits the 12 MiB block; 0.5 MiB rest is not split
  EXPECT_EQ(sim.allocated_bytes(), 12 * kMiB);
  EXPECT_EQ(sim.stats().peak_requested_bytes, 12 * kMiB);
}

TEST(PlanDynamicSim, fragmenting_sequence_reserves_more_than_it_allocates) {
  // Four 12 MiB tensors, each its own segment. Freeing every other one leaves 24 MiB cached but
  // in two separate segments, which never merge; a 20 MiB request needs a fresh segment.
  //   step:   0   1   2
  //   a0,a2  [===)          freed at step 1
  //   a1,a3  [=======)      live to the end
  //   big        [===)      20 MiB: fits neither 12 MiB hole
  Problem p{{{"a0", 12 * kMiB, 512, 0, 1},
             {"a1", 12 * kMiB, 512, 0, 2},
             {"a2", 12 * kMiB, 512, 0, 1},
             {"a3", 12 * kMiB, 512, 0, 2},
             {"big", 20 * kMiB, 512, 1, 2}},
            0};
  const DynamicSimStats s = simulate_dynamic(p);
  EXPECT_EQ(s.peak_allocated_bytes, 48 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 68 * kMiB);
  EXPECT_GT(s.peak_reserved_bytes, s.peak_allocated_bytes);
  // The static plan needs only the live bytes: 24 + 20 = 44 MiB at step 1, 48 MiB at step 0.
  EXPECT_EQ(solve_heuristic(p).plan.peak, 48 * kMiB);
}

TEST(PlanDynamicSim, freed_blocks_merge_within_a_segment) {
  DynamicAllocatorSim sim;
  const auto a = sim.allocate(512 * 1024);
  const auto b = sim.allocate(512 * 1024);
  const auto c = sim.allocate(512 * 1024);
  sim.release(a);
  sim.release(c);
  sim.release(b);  // merges with both neighbours: the whole 2 MiB segment is one free block again
  sim.allocate(1 * kMiB);
  sim.allocate(1 * kMiB);
  EXPECT_EQ(sim.reserved_bytes(), 2 * kMiB);
}

TEST(PlanDynamicSim, over_capacity_releases_free_segments_then_counts_an_oom) {
  Problem p{{{"a", 12 * kMiB, 512, 0, 1}, {"b", 14 * kMiB, 512, 1, 2}, {"c", 30 * kMiB, 512, 1, 2}},
            20 * kMiB};
  // a's 12 MiB segment is free at step 1 but too small for b, and 12 + 14 MiB exceeds 20 MiB:
  // empty_cache releases a's segment and b fits. c cannot fit (14 + 30 > 20 MiB): one OOM.
  const DynamicSimStats s = simulate_dynamic(p);
  EXPECT_EQ(s.segments_released, 1);
  EXPECT_EQ(s.oom_requests, 1);
}

}  // namespace memo::plan
