// Problems and plans as text, so any planner run can be saved and replayed. A line format:
//   memo-plan-problem 1                    magic and version
//   capacity <bytes>                       0 = unlimited
//   buffers <n>
//   <name> <size> <align> <begin> <end>    n lines; name %XX-escapes bytes <= 0x20, '%' and 0x7f
//   end
// and
//   memo-plan-plan 1
//   peak <bytes>
//   offsets <n>
//   <offset>                               n lines, in buffer order
//   end
// Blank lines and lines starting with '#' are ignored. Readers reject anything else with
// FormatError naming the line number; they do not check the problem's rules (check_problem does).
#pragma once

#include <string>
#include <string_view>

#include "memo/memory/plan/problem.h"

namespace memo::plan {

std::string to_text(const Problem& problem);
std::string to_text(const Plan& plan);
Problem problem_from_text(std::string_view text);
Plan plan_from_text(std::string_view text);

}  // namespace memo::plan
