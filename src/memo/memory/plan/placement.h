// Internal to the planner: place buffers one at a time, in a given order, at an offset where they
// fit against the buffers already placed. The heuristics choose the order; the MIP uses it to
// turn its solution into exact aligned offsets. Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

#include "memo/memory/plan/problem.h"

namespace memo::plan {

// Which free gap a buffer takes among the gaps left by already-placed buffers alive at the same
// time as it. When no gap fits, the buffer goes on top of them (lowest aligned offset above all).
enum class GapRule {
  kSmallestGap,  // best fit: the smallest gap that fits, ties to the lowest offset (TFLite)
  kLowestGap,    // first fit: the lowest offset where it fits
};
const char* gap_rule_name(GapRule rule);

// Places buffers in `order` (indices into problem.buffers, each once). Adds the number of gaps
// examined to *candidates. The result's peak is the max of offset + aligned size.
Plan place_in_order(const Problem& problem, const std::vector<std::size_t>& order, GapRule rule,
                    std::int64_t* candidates);

}  // namespace memo::plan
