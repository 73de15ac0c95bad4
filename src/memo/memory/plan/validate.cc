// The plan validator. Deliberately independent: it recomputes rounding and overlap itself rather
// than calling helpers the solvers use (see validate.h).
#include "memo/memory/plan/validate.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

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
  // Overlaps by a sweep over time: at each step the buffers that end leave, then those that begin
  // enter a map of the live buffers' byte ranges by their first byte. The live ranges are disjoint
  // (each entered after the check below), so a new range overlaps one of them only if it overlaps
  // its neighbour on either side. O(n log n): a pipeline stage's whole step has 10^5 buffers.
  std::vector<std::size_t> by_begin, by_end;
  for (std::size_t i = 0; i < n; ++i)
    if (rounded_bytes(problem.buffers[i]) > 0) by_begin.push_back(i), by_end.push_back(i);
  std::sort(by_begin.begin(), by_begin.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(problem.buffers[a].begin, a) < std::pair(problem.buffers[b].begin, b);
  });
  std::sort(by_end.begin(), by_end.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(problem.buffers[a].end, a) < std::pair(problem.buffers[b].end, b);
  });
  std::map<Bytes, std::size_t> live;  // first byte -> buffer
  std::size_t ended = 0;
  auto overlap = [&](std::size_t i, std::size_t j) {
    if (i > j) std::swap(i, j);
    const Bytes a_lo = plan.offsets[i], a_hi = a_lo + rounded_bytes(problem.buffers[i]);
    const Bytes b_lo = plan.offsets[j], b_hi = b_lo + rounded_bytes(problem.buffers[j]);
    return PlanError(str(describe(problem, plan, i), " overlaps ", describe(problem, plan, j),
                         " by ", std::min(a_hi, b_hi) - std::max(a_lo, b_lo), " bytes"));
  };
  for (std::size_t i : by_begin) {
    const Buffer& b = problem.buffers[i];
    for (; ended < by_end.size() && problem.buffers[by_end[ended]].end <= b.begin; ++ended)
      live.erase(plan.offsets[by_end[ended]]);
    const Bytes lo = plan.offsets[i], hi = lo + rounded_bytes(b);
    const auto above = live.lower_bound(lo);
    if (above != live.end() && above->first < hi) throw overlap(i, above->second);
    if (above != live.begin()) {
      const std::size_t below = std::prev(above)->second;
      if (plan.offsets[below] + rounded_bytes(problem.buffers[below]) > lo) throw overlap(i, below);
    }
    live.emplace(lo, i);
  }
}

}  // namespace memo::plan
