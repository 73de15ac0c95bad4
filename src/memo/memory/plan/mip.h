// The exact planner: DESIGN.md section 2's MIP solved by COIN-OR CBC, after the heuristics.
//   minimise M  s.t.  A_i + S_i <= M                               for every buffer i
//                     A_i + S_i <= A_j + z_ij U                     for each pair alive together
//                     A_j + S_j <= A_i + (1 - z_ij) U               (z_ij = 0: i below j)
//                     A_i >= 0, a multiple of align_i;  lower_bound <= M <= U
// U (the big-M) is the heuristic's peak when that fits (no better plan needs more), else capacity.
// See Note [MIP scaling and repair] in mip.cc for units, symmetry breaking and how CBC's solution
// becomes exact aligned offsets.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "memo/memory/plan/heuristic.h"
#include "memo/memory/plan/problem.h"

namespace memo::plan {

struct MipOptions {
  // Wall-clock limit for the whole solve (memo plan --mip-seconds, per level). CBC checks it
  // between nodes, so a large model can overrun it at the root (300 buffers: up to ~4 s in
  // plan_bench).
  double time_limit_seconds = 10.0;
  bool verbose = false;             // show CBC's log (no flag: for debugging the planner)
  bool warm_start = true;           // give CBC the heuristic plan as its first incumbent
  bool stop_at_lower_bound = true;  // skip CBC when the heuristic already reaches the lower bound
  // Accept a plan within this fraction of the proven bound: skip CBC when the heuristic is that
  // close to the lower bound (with stop_at_lower_bound), and let CBC stop at that gap. 1e-4 of a
  // 40 GiB arena is 4 MiB; 0 insists on proven optimality (no flag; the tests set it).
  double relative_gap = 1e-4;
  bool break_symmetry = true;  // fix one pair's order (a plan upside down is also a plan)
  HeuristicOptions heuristic;  // for the warm start and the big-M
  // Extra CBC switches, passed as "-name value" on CBC's command line, e.g. {"cuts", "off"} (no
  // flag: for experiments from code). Applied after memo's own settings, so they can override them.
  std::vector<std::pair<std::string, std::string>> cbc_parameters;
};

// Runs solve_heuristic, then (unless it is within relative_gap of the lower bound and
// stop_at_lower_bound) CBC.
// Returns the best plan of the two and the proven bound (CBC's best bound, at least
// lower_bound(problem)). Status: kOptimal when peak equals that bound; kTimeout when the time
// limit ended the search first; kInfeasible when no plan within capacity was found (proven when
// lower_bound > capacity); else kFeasible. `solver` is "mip" when CBC's plan won, else the
// heuristic's name. The result is deterministic unless the time limit is what stops CBC.
SolveResult solve_mip(const Problem& problem, const MipOptions& options = {});

}  // namespace memo::plan
