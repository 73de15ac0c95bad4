// Greedy planners: order the buffers, then place each where it fits against the buffers already
// placed that are alive at the same time (placement.h). Microseconds to milliseconds; no proof of
// optimality beyond reaching the lower bound. They give the MIP its warm start and its big-M.
#pragma once

#include "memo/memory/plan/placement.h"
#include "memo/memory/plan/problem.h"

namespace memo::plan {

struct HeuristicOptions {
  // Which gap a buffer takes (smallest or lowest; no flag). solve_heuristic ignores it when
  // try_all_gap_rules is set.
  GapRule gap_rule = GapRule::kSmallestGap;
  // solve_heuristic: try every (order, gap rule) pair, not only options.gap_rule (no flag; the
  // planner tests switch it off to test one rule).
  bool try_all_gap_rules = true;
};

// Greedy by size (TFLite ArenaPlanner / "Greedy by Size", Pisarchyk & Lee 2020): largest aligned
// size first, ties by earlier begin, then longer lifetime, then buffer index.
SolveResult solve_best_fit_size(const Problem& problem, const HeuristicOptions& options = {});

// Greedy by lifetime (XLA GlobalDecreasingSizeBestFitHeap with its kTemporal sort): longest
// lifetime (end - begin) first, ties by larger size, then earlier begin, then buffer index.
// Long-lived buffers go to the bottom of the arena, where they form a floor that the many
// short-lived transients stack on without splitting the free space into islands; the size order
// instead fills gaps well when a few large buffers dominate. Neither wins everywhere.
SolveResult solve_best_fit_lifetime(const Problem& problem, const HeuristicOptions& options = {});

// Runs both orders (with each gap rule when try_all_gap_rules) and keeps the smallest peak; ties go
// to the first tried (size order, smallest gap). `solver` names the winner, counters add up all.
SolveResult solve_heuristic(const Problem& problem, const HeuristicOptions& options = {});

// Each heuristic reports: kOptimal when its peak equals lower_bound(problem) (then proven),
// kInfeasible when capacity > 0 and its peak exceeds it (the plan is still returned, so the
// caller can say by how much), else kFeasible. result.lower_bound is lower_bound(problem).

}  // namespace memo::plan
