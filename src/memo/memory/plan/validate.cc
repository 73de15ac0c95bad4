// The plan validator. Deliberately naive: it recomputes rounding and overlap itself rather than
// calling helpers the solvers use (see validate.h).
#include "memo/memory/plan/validate.h"

#include <algorithm>

namespace memo::plan {
namespace {

Bytes rounded_bytes(const Buffer& b) { return (b.size + b.align - 1) / b.align * b.align; }

std::string describe(const Problem& problem, const Plan& plan, std::size_t i) {
  const Buffer& b = problem.buffers[i];
  return str("buffer ", i, " '", b.name, "' at bytes [", plan.offsets[i], ", ",
             plan.offsets[i] + rounded_bytes(b), ") alive [", b.begin, ", ", b.end, ")");
}

}  // namespace

void validate(const Problem& problem, const Plan& plan) {
  check_problem(problem);
  const std::size_t n = problem.buffers.size();
  if (plan.offsets.size() != n)
    throw PlanError(str("plan has ", plan.offsets.size(), " offsets for ", n, " buffers"));
  if (problem.capacity > 0 && plan.peak > problem.capacity)
    throw PlanError(str("plan peak ", plan.peak, " bytes (", gib(double(plan.peak)),
                        ") exceeds capacity ", problem.capacity, " bytes (",
                        gib(double(problem.capacity)), "), short ", plan.peak - problem.capacity,
                        " bytes"));
  for (std::size_t i = 0; i < n; ++i) {
    const Buffer& b = problem.buffers[i];
    const Bytes offset = plan.offsets[i];
    if (offset < 0) throw PlanError(str(describe(problem, plan, i), ": offset is negative"));
    if (offset % b.align != 0)
      throw PlanError(
          str(describe(problem, plan, i), ": offset is not a multiple of align ", b.align));
    if (offset + rounded_bytes(b) > plan.peak)
      throw PlanError(
          str(describe(problem, plan, i), ": ends past the plan peak ", plan.peak, " bytes"));
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const Buffer& a = problem.buffers[i];
      const Buffer& b = problem.buffers[j];
      const bool same_time = a.begin < b.end && b.begin < a.end;
      const Bytes a_lo = plan.offsets[i], a_hi = a_lo + rounded_bytes(a);
      const Bytes b_lo = plan.offsets[j], b_hi = b_lo + rounded_bytes(b);
      const bool same_bytes = a_lo < b_hi && b_lo < a_hi;
      if (same_time && same_bytes)
        throw PlanError(str(describe(problem, plan, i), " overlaps ", describe(problem, plan, j),
                            " by ", std::min(a_hi, b_hi) - std::max(a_lo, b_lo), " bytes"));
    }
  }
}

}  // namespace memo::plan
