// Problem checks and the live-bytes lower bound. See problem.h.
#include "memo/memory/plan/problem.h"

#include <algorithm>
#include <utility>

namespace memo::plan {

const char* status_name(Status status) {
  switch (status) {
    case Status::kOptimal:
      return "optimal";
    case Status::kFeasible:
      return "feasible";
    case Status::kInfeasible:
      return "infeasible";
    case Status::kTimeout:
      return "timeout";
  }
  return "unknown";
}

Bytes aligned_size(const Buffer& buffer) {
  return (buffer.size + buffer.align - 1) / buffer.align * buffer.align;
}

void check_problem(const Problem& problem) {
  if (problem.capacity < 0)
    throw PlanError(
        str("problem capacity is ", problem.capacity, " bytes; use >= 0 (0 = unlimited)"));
  if (problem.buffers.size() > std::size_t{INT32_MAX})
    throw PlanError(str("problem has ", problem.buffers.size(), " buffers; at most ", INT32_MAX));
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const Buffer& b = problem.buffers[i];
    const auto where = [&] { return str("buffer ", i, " '", b.name, "'"); };
    if (b.name.empty())
      throw PlanError(str("buffer ", i, " has an empty name; every buffer needs one"));
    if (b.size < 0) throw PlanError(str(where(), " has size ", b.size, " bytes; use >= 0"));
    if (b.align <= 0) throw PlanError(str(where(), " has align ", b.align, " bytes; use > 0"));
    if (b.size > (INT64_MAX / 4))
      throw PlanError(str(where(), " has size ", b.size, " bytes; too large"));
    if (b.end <= b.begin)
      throw PlanError(
          str(where(), " has lifetime [", b.begin, ", ", b.end, "); end must exceed begin"));
  }
}

Bytes lower_bound(const Problem& problem) {
  // Sweep the steps where the live set changes. At one step, frees (end == t) come before
  // allocations (begin == t) because lifetimes are half-open.
  std::vector<std::pair<Step, Bytes>> events;  // (step, +size at begin / -size at end)
  events.reserve(2 * problem.buffers.size());
  for (const Buffer& b : problem.buffers) {
    events.emplace_back(b.begin, aligned_size(b));
    events.emplace_back(b.end, -aligned_size(b));
  }
  std::sort(events.begin(), events.end());  // at equal step, negative deltas sort first
  Bytes live = 0, peak = 0;
  for (const auto& [step, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return peak;
}

double gap_percent(Bytes peak, Bytes lower_bound) {
  if (lower_bound == 0) return 0.0;
  return 100.0 * double(peak - lower_bound) / double(lower_bound);
}

}  // namespace memo::plan
