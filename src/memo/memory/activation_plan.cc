#include "memo/memory/activation_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "memo/memory/plan/heuristic.h"
#include "memo/memory/plan/mip.h"
#include "memo/memory/plan/validate.h"

namespace memo {
namespace {

// A transient's place in its pass: its index among the pass's transients, and its lifetime in
// those indices (see Note [Request-order time], counted within the pass).
struct LocalRequest {
  size_t request;
  plan::Step begin, end;
};

std::vector<LocalRequest> local_requests(const Trace& trace, int phase) {
  std::vector<LocalRequest> out;
  for (size_t i = 0; i < trace.requests.size(); ++i)
    if (trace.requests[i].phase == phase) out.push_back({i, plan::Step(out.size()), 0});
  for (LocalRequest& l : out) {
    const plan::Step global_end = trace.requests[l.request].end;
    l.end = 0;
    for (const LocalRequest& m : out) l.end += trace.requests[m.request].begin < global_end;
  }
  return out;
}

std::string describe(const TracedRequest& r, const LocalRequest& l) {
  return str("'", r.name, "' ", r.bytes, " B alive [", l.begin, ", ", l.end, ")");
}

plan::SolveResult solve_level(const plan::Problem& problem, const ActivationPlanOptions& options) {
  plan::SolveResult r;
  if (options.solver == PlanSolver::kMip) {
    plan::MipOptions mip;
    mip.time_limit_seconds = options.mip_seconds;
    r = plan::solve_mip(problem, mip);
  } else {
    r = plan::solve_heuristic(problem);
  }
  plan::validate(problem, r.plan);
  return r;
}

int first_phase(const Trace& trace, Pass pass) {
  for (size_t p = 0; p < trace.phases.size(); ++p)
    if (trace.phases[p].pass == pass) return int(p);
  return -1;
}

}  // namespace

PlanSolver plan_solver_from_name(const std::string& name) {
  if (name == "heuristic") return PlanSolver::kHeuristic;
  if (name == "mip") return PlanSolver::kMip;
  throw ConfigError(str("--solver '", name, "' is not a planner; use heuristic or mip"));
}

const char* plan_solver_name(PlanSolver solver) {
  return solver == PlanSolver::kMip ? "mip" : "heuristic";
}

double ActivationPlan::solve_seconds() const {
  return forward.result.solve_seconds + backward.result.solve_seconds +
         iteration.result.solve_seconds;
}

void check_layers_identical(const Trace& trace) {
  for (Pass pass : {Pass::kForward, Pass::kBackward}) {
    const int first = first_phase(trace, pass);
    if (first < 0) continue;
    const std::vector<LocalRequest> ref = local_requests(trace, first);
    for (size_t p = 0; p < trace.phases.size(); ++p) {
      if (trace.phases[p].pass != pass || int(p) == first) continue;
      const std::vector<LocalRequest> got = local_requests(trace, int(p));
      const TracePhase& ph = trace.phases[p];
      const auto where = [&] {
        return str("layer ", ph.layer, "'s ", pass_name(pass), " transients differ from layer ",
                   trace.phases[size_t(first)].layer, "'s");
      };
      for (size_t k = 0; k < std::min(ref.size(), got.size()); ++k) {
        const TracedRequest &a = trace.requests[ref[k].request],
                            &b = trace.requests[got[k].request];
        if (a.name != b.name || a.bytes != b.bytes || ref[k].begin != got[k].begin ||
            ref[k].end != got[k].end)
          throw Error(str(where(), " at its request ", k, " (request ", b.begin, " of the step): ",
                          "expected ", describe(a, ref[k]), ", got ", describe(b, got[k]),
                          "; the bi-level plan needs one sub-trace for all layers"));
      }
      if (ref.size() != got.size())
        throw Error(str(where(), ": ", got.size(), " requests instead of ", ref.size(),
                        "; the bi-level plan needs one sub-trace for all layers"));
    }
  }
}

plan::Problem layer_problem(const Trace& trace, int phase) {
  plan::Problem p;
  for (const LocalRequest& l : local_requests(trace, phase)) {
    const TracedRequest& r = trace.requests[l.request];
    p.buffers.push_back(plan::Buffer{r.name, r.bytes, kAlignBytes, l.begin, l.end});
  }
  return p;
}

plan::Problem flat_problem(const Trace& trace) {
  plan::Problem p;
  for (const TracedRequest& r : trace.requests)
    p.buffers.push_back(
        plan::Buffer{str(r.name, "#", r.begin), r.bytes, kAlignBytes, r.begin, r.end});
  return p;
}

ActivationPlan plan_activations(const Trace& trace, const ActivationPlanOptions& options) {
  check_layers_identical(trace);
  ActivationPlan out;
  out.trace = trace;
  // level 1: the first layer's passes stand for all (checked identical above)
  const int fwd = first_phase(trace, Pass::kForward), bwd = first_phase(trace, Pass::kBackward);
  out.forward.name = "level 1 forward";
  out.backward.name = "level 1 backward";
  if (fwd >= 0) out.forward.problem = layer_problem(trace, fwd);
  if (bwd >= 0) out.backward.problem = layer_problem(trace, bwd);
  out.forward.result = solve_level(out.forward.problem, options);
  out.backward.result = solve_level(out.backward.problem, options);

  // level 2: requests outside the layer passes as themselves, each layer pass as one block
  out.iteration.name = "level 2 iteration";
  plan::Problem& top = out.iteration.problem;
  std::vector<size_t> top_index(trace.requests.size(), SIZE_MAX);
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const TracedRequest& r = trace.requests[i];
    if (r.phase >= 0) continue;
    top_index[i] = top.buffers.size();
    top.buffers.push_back(plan::Buffer{r.name, r.bytes, kAlignBytes, r.begin, r.end});
  }
  std::vector<size_t> block_index(trace.phases.size(), SIZE_MAX);
  for (size_t p = 0; p < trace.phases.size(); ++p) {
    const TracePhase& ph = trace.phases[p];
    const plan::Bytes block =
        (ph.pass == Pass::kForward ? out.forward : out.backward).result.plan.peak;
    if (block == 0 || ph.end <= ph.begin) continue;
    block_index[p] = top.buffers.size();
    top.buffers.push_back(plan::Buffer{str("layer", ph.layer, ".", pass_name(ph.pass)), block,
                                       kAlignBytes, ph.begin, ph.end});
  }
  out.iteration.result = solve_level(top, options);
  out.arena_bytes = out.iteration.result.plan.peak;

  // join: level-2 offset, plus the level-1 offset inside a layer block
  out.offsets.assign(trace.requests.size(), 0);
  for (size_t p = 0; p < trace.phases.size(); ++p) {
    if (block_index[p] == SIZE_MAX) continue;
    const plan::Bytes base = out.iteration.result.plan.offsets[block_index[p]];
    const plan::Plan& inner =
        (trace.phases[p].pass == Pass::kForward ? out.forward : out.backward).result.plan;
    const std::vector<LocalRequest> local = local_requests(trace, int(p));
    for (size_t k = 0; k < local.size(); ++k)
      out.offsets[local[k].request] = base + inner.offsets[k];
  }
  for (size_t i = 0; i < trace.requests.size(); ++i)
    if (top_index[i] != SIZE_MAX) out.offsets[i] = out.iteration.result.plan.offsets[top_index[i]];

  // Note [Joined plan check]: the levels are validated one by one above; the joined offsets are
  // validated again against every request with its own lifetime, so a splitting bug (a block too
  // short, an offset from the wrong level) cannot reach a run.
  const plan::Problem flat = flat_problem(trace);
  plan::validate(flat, plan::Plan{out.offsets, out.arena_bytes});
  out.lower_bound_bytes = plan::lower_bound(flat);
  return out;
}

}  // namespace memo
