#include "memo/memory/plan/problem.h"

#include <gtest/gtest.h>

namespace memo::plan {

TEST(PlanProblem, lower_bound_is_largest_live_sum_with_half_open_lifetimes) {
  // a [0,2) 100 B, b [2,4) 200 B: never alive together. c [1,3) 64 B overlaps both.
  Problem p{{{"a", 100, 64, 0, 2}, {"b", 200, 64, 2, 4}, {"c", 64, 64, 1, 3}}, 0};
  // aligned: a 128, b 256, c 64. Step 1: a + c = 192. Step 2: b + c = 320.
  EXPECT_EQ(lower_bound(p), 320);
}

TEST(PlanProblem, aligned_size_rounds_up_to_align) {
  EXPECT_EQ(aligned_size(Buffer{"x", 1, 256, 0, 1}), 256);
  EXPECT_EQ(aligned_size(Buffer{"x", 256, 256, 0, 1}), 256);
  EXPECT_EQ(aligned_size(Buffer{"x", 0, 256, 0, 1}), 0);
}

TEST(PlanProblem, check_problem_names_the_bad_buffer) {
  Problem p{{{"ok", 10, 64, 0, 1}, {"backwards", 10, 64, 5, 5}}, 0};
  try {
    check_problem(p);
    FAIL() << "expected PlanError";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("buffer 1 'backwards'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[5, 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_problem(Problem{{{"a", 10, 0, 0, 1}}, 0}), PlanError);
  EXPECT_THROW(check_problem(Problem{{{"", 10, 64, 0, 1}}, 0}), PlanError);
  EXPECT_THROW(check_problem(Problem{{{"a", -1, 64, 0, 1}}, 0}), PlanError);
  EXPECT_THROW(check_problem(Problem{{}, -5}), PlanError);
}

TEST(PlanProblem, gap_percent_is_relative_to_the_bound) {
  EXPECT_DOUBLE_EQ(gap_percent(110, 100), 10.0);
  EXPECT_DOUBLE_EQ(gap_percent(0, 0), 0.0);
}

}  // namespace memo::plan
