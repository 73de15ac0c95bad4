#include "memo/memory/plan/mip.h"

#include <gtest/gtest.h>

#include "memo/memory/plan/validate.h"
#include "memory/plan/plan_test_util.h"

namespace memo::plan {
namespace {

MipOptions forced_cbc() {
  MipOptions o;
  o.stop_at_lower_bound = false;  // make CBC run even when the heuristic is optimal
  o.relative_gap = 0.0;           // and prove optimality
  return o;
}

}  // namespace

TEST(PlanMip, skips_cbc_when_the_heuristic_reaches_the_lower_bound) {
  Problem p{{{"a", 1024, 64, 0, 2}, {"b", 512, 64, 1, 4}, {"c", 1024, 64, 2, 4}}, 0};
  SolveResult r = solve_mip(p);
  validate(p, r.plan);
  EXPECT_EQ(r.status, Status::kOptimal);
  EXPECT_EQ(r.counters.nodes, 0);
  EXPECT_EQ(r.counters.iterations, 0);
  EXPECT_NE(r.solver, "mip");
}

TEST(PlanMip, beats_the_greedy_trap_and_proves_it) {
  Problem p = testing::greedy_trap();
  SolveResult r = solve_mip(p);
  validate(p, r.plan);
  EXPECT_EQ(r.status, Status::kOptimal);
  EXPECT_EQ(r.plan.peak, 20032);
  EXPECT_EQ(r.lower_bound, 20032);
  EXPECT_EQ(r.solver, "mip");
}

TEST(PlanMip, tight_capacity_at_the_optimum_is_feasible) {
  Problem p = testing::greedy_trap();
  p.capacity = 20032;  // the heuristic is over this by 1088 B; the MIP is not
  SolveResult r = solve_mip(p);
  validate(p, r.plan);
  EXPECT_EQ(r.status, Status::kOptimal);
  EXPECT_EQ(r.plan.peak, p.capacity);
}

TEST(PlanMip, below_the_lower_bound_is_proven_infeasible_with_the_shortfall) {
  Problem p = testing::greedy_trap();
  p.capacity = 20000;
  SolveResult r = solve_mip(p);
  EXPECT_EQ(r.status, Status::kInfeasible);
  EXPECT_EQ(r.lower_bound, 20032);  // 32 B short, proven
  EXPECT_EQ(r.plan.peak, 21120);    // the best plan found, for the message
  EXPECT_EQ(r.plan.offsets.size(), p.buffers.size());
}

TEST(PlanMip, relative_gap_accepts_a_close_heuristic_without_cbc) {
  MipOptions o;
  o.relative_gap = 0.06;  // the trap's greedy plan is 1088 / 20032 = 5.4% above the bound
  SolveResult r = solve_mip(testing::greedy_trap(), o);
  EXPECT_EQ(r.status, Status::kFeasible);
  EXPECT_EQ(r.plan.peak, 21120);
  EXPECT_EQ(r.lower_bound, 20032);
  EXPECT_EQ(r.counters.nodes, 0);
}

TEST(PlanMip, matches_brute_force_on_small_random_problems) {
  for (std::uint32_t seed = 0; seed < 24; ++seed) {
    const int n = 3 + int(seed % 5);  // 3..7 buffers
    Problem p = testing::random_problem(n, 1000 + seed);
    if (seed % 4 == 1)  // mixed alignments: integer offset columns
      for (std::size_t i = 0; i < p.buffers.size(); i += 2) p.buffers[i].align = 512;
    const Bytes optimum = testing::brute_force_peak(p);
    const SolveResult heuristic = solve_heuristic(p);
    const SolveResult mip = solve_mip(p, forced_cbc());
    ASSERT_NO_THROW(validate(p, mip.plan)) << "seed " << seed;
    EXPECT_EQ(mip.status, Status::kOptimal) << "seed " << seed;
    EXPECT_EQ(mip.plan.peak, optimum) << "seed " << seed;
    EXPECT_LE(mip.plan.peak, heuristic.plan.peak);
    EXPECT_LE(mip.lower_bound, mip.plan.peak);
    EXPECT_GE(mip.lower_bound, lower_bound(p));
  }
}

TEST(PlanMip, option_combinations_agree_on_feasibility_and_peak) {
  for (std::uint32_t seed = 0; seed < 4; ++seed) {
    Problem base = testing::random_problem(6, 2000 + seed);
    if (seed == 0) base = testing::greedy_trap();
    const Bytes optimum = testing::brute_force_peak(base);
    for (Bytes capacity : {Bytes{0}, optimum, optimum - 64}) {
      Problem p = base;
      p.capacity = capacity;
      for (int mask = 0; mask < 8; ++mask) {
        MipOptions o;
        o.relative_gap = mask == 0 ? 1e-4 : 0.0;  // tiny problems: 1e-4 is below one alignment unit
        o.warm_start = mask & 1;
        o.stop_at_lower_bound = mask & 2;
        o.break_symmetry = mask & 4;
        const SolveResult r = solve_mip(p, o);
        const bool fits = capacity == 0 || capacity >= optimum;
        EXPECT_EQ(r.status, fits ? Status::kOptimal : Status::kInfeasible)
            << "seed " << seed << " mask " << mask;
        if (fits) {
          EXPECT_EQ(r.plan.peak, optimum);
          validate(p, r.plan);
        }
      }
    }
  }
}

TEST(PlanMip, a_plan_is_returned_even_when_the_time_limit_is_zero) {
  Problem p = testing::random_problem(25, 5);
  MipOptions o = forced_cbc();
  o.time_limit_seconds = 0.0;
  SolveResult r = solve_mip(p, o);
  validate(p, r.plan);
  EXPECT_LE(r.plan.peak, solve_heuristic(p).plan.peak);
  EXPECT_LE(r.lower_bound, r.plan.peak);
}

}  // namespace memo::plan
