#include "memo/memory/plan/text_format.h"

#include <gtest/gtest.h>

#include "memo/memory/plan/heuristic.h"
#include "memory/plan/plan_test_util.h"

namespace memo::plan {
namespace {

std::string format_error(std::string_view text) {
  try {
    problem_from_text(text);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PlanText, problem_and_plan_round_trip) {
  Problem p = testing::random_problem(20, 3);
  p.capacity = 123456;
  p.buffers[2].name = "layer.0 attn%out\tx";  // spaces, tabs and '%' are escaped
  p.buffers[3].align = 4096;
  const Problem q = problem_from_text(to_text(p));
  ASSERT_EQ(q.buffers.size(), p.buffers.size());
  EXPECT_EQ(q.capacity, p.capacity);
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    EXPECT_EQ(q.buffers[i].name, p.buffers[i].name);
    EXPECT_EQ(q.buffers[i].size, p.buffers[i].size);
    EXPECT_EQ(q.buffers[i].align, p.buffers[i].align);
    EXPECT_EQ(q.buffers[i].begin, p.buffers[i].begin);
    EXPECT_EQ(q.buffers[i].end, p.buffers[i].end);
  }
  p.capacity = 0;
  const Plan plan = solve_heuristic(p).plan;
  const Plan back = plan_from_text(to_text(plan));
  EXPECT_EQ(back.offsets, plan.offsets);
  EXPECT_EQ(back.peak, plan.peak);
}

TEST(PlanText, format_starts_with_magic_and_version) {
  const std::string text = to_text(Problem{{{"a", 10, 64, 0, 1}}, 0});
  EXPECT_EQ(text, "memo-plan-problem 1\ncapacity 0\nbuffers 1\na 10 64 0 1\nend\n");
  EXPECT_EQ(to_text(Plan{{0, 64}, 128}), "memo-plan-plan 1\npeak 128\noffsets 2\n0\n64\nend\n");
}

TEST(PlanText, comments_and_blank_lines_are_skipped) {
  const Problem p = problem_from_text(
      "# saved by a test\nmemo-plan-problem 1\n\ncapacity 0\nbuffers 1\na 1 64 0 1\nend\n");
  ASSERT_EQ(p.buffers.size(), 1u);
  EXPECT_EQ(p.buffers[0].name, "a");
}

TEST(PlanText, malformed_input_is_rejected_with_its_line_number) {
  EXPECT_NE(
      format_error("memo-plan-plan 1\n").find("line 1: expected header 'memo-plan-problem 1'"),
      std::string::npos);
  EXPECT_NE(format_error("memo-plan-problem 2\n").find("line 1: version 2 is not supported"),
            std::string::npos);
  EXPECT_NE(format_error("memo-plan-problem 1\ncapacity x\n")
                .find("line 2: expected an integer capacity, got 'x'"),
            std::string::npos);
  const std::string short_line =
      format_error("memo-plan-problem 1\ncapacity 0\nbuffers 2\na 1 64 0 1\nb 1 64 0\nend\n");
  EXPECT_NE(short_line.find(
                "line 5: buffer 1: expected '<name> <size> <align> <begin> <end>', got 4 fields"),
            std::string::npos)
      << short_line;
  EXPECT_NE(format_error("memo-plan-problem 1\ncapacity 0\nbuffers 2\na 1 64 0 1\n")
                .find("line 5: text ends"),
            std::string::npos);
  EXPECT_NE(format_error("memo-plan-problem 1\ncapacity 0\nbuffers 0\nend\nmore\n")
                .find("line 5: text after 'end'"),
            std::string::npos);
  EXPECT_NE(format_error("memo-plan-problem 1\ncapacity 0\nbuffers 1\na%4 1 64 0 1\nend\n")
                .find("line 4: truncated"),
            std::string::npos);
  EXPECT_NE(format_error("memo-plan-problem 1\ncapacity 0\nbuffers -1\nend\n")
                .find("line 3: buffers count -1"),
            std::string::npos);
  EXPECT_THROW(plan_from_text("memo-plan-plan 1\npeak 1\noffsets 1\n1 2\nend\n"), FormatError);
}

}  // namespace memo::plan
