// The static activation plan of one training step, from its trace (memory/trace.h): split the
// trace into the two levels of Note [Bi-level planning] (plan/problem.h), solve each with the
// planner, join them into one byte offset per request, and validate every plan, including the
// joined one against the whole step's requests. PlannedAllocator (planned_allocator.h) executes
// the result. Pure: no memory is allocated here.
#pragma once

#include <string>
#include <vector>

#include "memo/memory/plan/problem.h"
#include "memo/memory/trace.h"

namespace memo {

enum class PlanSolver {
  kHeuristic,  // the greedy planners only (milliseconds)
  kMip,        // then CBC, for a level whose greedy plan is above its lower bound (time-limited)
};
PlanSolver plan_solver_from_name(const std::string& name);  // "heuristic" | "mip"; ConfigError
const char* plan_solver_name(PlanSolver solver);

struct ActivationPlanOptions {
  PlanSolver solver = PlanSolver::kHeuristic;  // CLI: --solver
  double mip_seconds = 10.0;  // CBC wall-clock limit per level (CLI: --mip-seconds)
};

// One level's problem and its validated solution.
struct PlanLevel {
  std::string name;  // "level 1 forward", "level 1 backward", "level 2 iteration"
  plan::Problem problem;
  plan::SolveResult result;
};

struct ActivationPlan {
  Trace trace;
  std::vector<plan::Bytes> offsets;  // per request: its byte offset in the arena
  plan::Bytes arena_bytes{};         // the level-2 peak: the one arena a run allocates
  // The whole step's live-bytes lower bound (largest sum of aligned live bytes at one request):
  // no placement of these requests needs less. arena_bytes above it is the plan's fragmentation.
  plan::Bytes lower_bound_bytes{};
  PlanLevel forward;             // one layer's forward transients; every layer reuses the offsets
  PlanLevel backward;            // one layer's backward transients
  PlanLevel iteration;           // the step with one block per layer pass
  double solve_seconds() const;  // all levels
};

// Throws Error unless every layer's forward (and backward) transient sub-trace equals the first
// layer's: names, sizes and lifetimes (DESIGN.md section 2: the allocation sequence is the same
// in every layer). The message names the layer, the pass, the request and both versions.
void check_layers_identical(const Trace& trace);

// The transients of trace.phases[phase], times relative to the pass (level 1).
plan::Problem layer_problem(const Trace& trace, int phase);

// Every request as its own buffer with its traced lifetime: the flat problem the bi-level plan
// is checked against, whose lower bound is the step's, and which the dynamic-allocator
// simulation replays (plan::simulate_dynamic).
plan::Problem flat_problem(const Trace& trace);

// Splits, solves, joins and validates. Throws Error if the layers' sub-traces differ and
// PlanError if a plan fails validation (a planner bug).
ActivationPlan plan_activations(const Trace& trace, const ActivationPlanOptions& options = {});

}  // namespace memo
