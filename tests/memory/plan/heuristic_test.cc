#include "memo/memory/plan/heuristic.h"

#include <gtest/gtest.h>

#include "memo/memory/plan/validate.h"
#include "memory/plan/plan_test_util.h"

namespace memo::plan {

TEST(PlanHeuristic, best_fit_size_stacks_overlapping_buffers_and_reuses_dead_space) {
  // a and b overlap; c starts after a ends and reuses a's bytes.
  Problem p{{{"a", 1024, 64, 0, 2}, {"b", 512, 64, 1, 4}, {"c", 1024, 64, 2, 4}}, 0};
  SolveResult r = solve_best_fit_size(p);
  validate(p, r.plan);
  EXPECT_EQ(r.plan.offsets[0], 0);  // a: largest, first placed
  EXPECT_EQ(r.plan.offsets[2], 0);  // c: same size, placed second; a is dead by then
  EXPECT_EQ(r.plan.offsets[1], 1024);
  EXPECT_EQ(r.plan.peak, 1536);
  EXPECT_EQ(r.lower_bound, 1536);
  EXPECT_EQ(r.status, Status::kOptimal);
}

TEST(PlanHeuristic, smallest_gap_rule_keeps_the_large_gap_free) {
  // Placed by size: t1 @0, l1 @4096 (on t1), t2 @6144, l2 @7168. At step 5 only l1 and l2 live,
  // leaving gaps [0, 4096) and [6144, 7168) for s. Best fit takes the 1024 B gap, first fit 0.
  //   bytes: 0      4096    6144  7168 7680
  //   step 0 [ t1   ][ l1   ][ t2 ][l2]
  //   step 5 [ free ][ l1   ][free][l2]
  Problem p{{{"t1", 4096, 64, 0, 1},
             {"l1", 2048, 64, 0, 10},
             {"t2", 1024, 64, 0, 1},
             {"l2", 512, 64, 0, 10},
             {"s", 256, 64, 5, 6}},
            0};
  SolveResult best = solve_best_fit_size(p, {GapRule::kSmallestGap, false});
  SolveResult first = solve_best_fit_size(p, {GapRule::kLowestGap, false});
  validate(p, best.plan);
  validate(p, first.plan);
  EXPECT_EQ(best.plan.offsets[4], 6144);
  EXPECT_EQ(first.plan.offsets[4], 0);
  EXPECT_EQ(best.plan.peak, 7680);
  EXPECT_EQ(first.plan.peak, 7680);
}

TEST(PlanHeuristic, tight_capacity_equal_to_the_lower_bound_is_optimal) {
  Problem p{{{"a", 1024, 64, 0, 2}, {"b", 512, 64, 1, 4}, {"c", 1024, 64, 2, 4}}, 1536};
  SolveResult r = solve_heuristic(p);
  validate(p, r.plan);
  EXPECT_EQ(r.status, Status::kOptimal);
  EXPECT_EQ(r.plan.peak, p.capacity);
}

TEST(PlanHeuristic, over_capacity_is_infeasible_and_says_by_how_much) {
  Problem p{{{"a", 1024, 64, 0, 2}, {"b", 512, 64, 1, 4}, {"c", 1024, 64, 2, 4}}, 1408};
  SolveResult r = solve_heuristic(p);
  EXPECT_EQ(r.status, Status::kInfeasible);
  EXPECT_EQ(r.plan.peak - p.capacity, 128);  // lower bound 1536 is 128 B over 1408
  EXPECT_GT(r.lower_bound, p.capacity);      // proven: no plan can fit
  EXPECT_THROW(validate(p, r.plan), PlanError);
}

TEST(PlanHeuristic, greedy_trap_is_feasible_but_not_optimal) {
  Problem p = testing::greedy_trap();
  SolveResult size = solve_best_fit_size(p);
  SolveResult life = solve_best_fit_lifetime(p);
  SolveResult both = solve_heuristic(p);
  for (const SolveResult* r : {&size, &life, &both}) {
    validate(p, r->plan);
    EXPECT_EQ(r->status, Status::kFeasible) << r->solver;
    EXPECT_EQ(r->lower_bound, 20032);
  }
  EXPECT_EQ(size.plan.peak, 21120);
  EXPECT_EQ(both.plan.peak, std::min(size.plan.peak, life.plan.peak));
  // With capacity at the optimum the heuristic reports over capacity, by 1088 B.
  p.capacity = 20032;
  SolveResult tight = solve_heuristic(p);
  EXPECT_EQ(tight.status, Status::kInfeasible);
  EXPECT_EQ(tight.plan.peak - p.capacity, 1088);
}

TEST(PlanHeuristic, random_plans_validate_and_respect_the_lower_bound) {
  for (std::uint32_t seed = 0; seed < 40; ++seed) {
    for (Bytes align : {Bytes{64}, Bytes{256}}) {
      Problem p = testing::random_problem(5 + int(seed % 60), seed, align);
      if (seed % 3 == 0) p.buffers[0].align = 4096;  // one odd alignment
      SolveResult size = solve_best_fit_size(p);
      SolveResult life = solve_best_fit_lifetime(p);
      SolveResult both = solve_heuristic(p);
      for (const SolveResult* r : {&size, &life, &both}) {
        ASSERT_NO_THROW(validate(p, r->plan)) << r->solver << " seed " << seed;
        EXPECT_GE(r->plan.peak, r->lower_bound);
        EXPECT_EQ(r->lower_bound, lower_bound(p));
      }
      EXPECT_LE(both.plan.peak, std::min(size.plan.peak, life.plan.peak));
    }
  }
}

TEST(PlanHeuristic, is_deterministic_in_plan_and_counters) {
  Problem p = testing::random_problem(50, 7);
  SolveResult a = solve_heuristic(p), b = solve_heuristic(p);
  EXPECT_EQ(a.plan.offsets, b.plan.offsets);
  EXPECT_EQ(a.counters.candidates, b.counters.candidates);
  EXPECT_GE(a.counters.candidates, 50);  // at least one placement per buffer
  EXPECT_EQ(a.solver, b.solver);
}

TEST(PlanHeuristic, empty_problem_and_zero_size_buffers) {
  SolveResult empty = solve_heuristic(Problem{});
  EXPECT_EQ(empty.plan.peak, 0);
  EXPECT_EQ(empty.status, Status::kOptimal);
  Problem p{{{"zero", 0, 64, 0, 3}, {"a", 64, 64, 0, 3}}, 0};
  SolveResult r = solve_heuristic(p);
  validate(p, r.plan);
  EXPECT_EQ(r.plan.peak, 64);
}

}  // namespace memo::plan
