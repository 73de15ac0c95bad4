// The greedy planners. See heuristic.h.
#include "memo/memory/plan/heuristic.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <tuple>

namespace memo::plan {
namespace {

enum class Order { kSize, kLifetime };

std::vector<std::size_t> make_order(const Problem& problem, Order order) {
  std::vector<std::size_t> ids(problem.buffers.size());
  std::iota(ids.begin(), ids.end(), std::size_t{0});
  const auto& bs = problem.buffers;
  const auto key = [&](std::size_t i) {
    const Buffer& b = bs[i];
    // Descending fields are negated so that std::tuple's ascending comparison applies.
    return order == Order::kSize ? std::tuple(-aligned_size(b), b.begin, -(b.end - b.begin), i)
                                 : std::tuple(-(b.end - b.begin), -aligned_size(b), b.begin, i);
  };
  std::sort(ids.begin(), ids.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return ids;
}

SolveResult solve_ordered(const Problem& problem, Order order, GapRule rule) {
  const auto t0 = std::chrono::steady_clock::now();
  check_problem(problem);
  SolveResult result;
  result.lower_bound = lower_bound(problem);
  result.plan =
      place_in_order(problem, make_order(problem, order), rule, &result.counters.candidates);
  if (problem.capacity > 0 && result.plan.peak > problem.capacity)
    result.status = Status::kInfeasible;
  else if (result.plan.peak == result.lower_bound)
    result.status = Status::kOptimal;
  else
    result.status = Status::kFeasible;
  result.solver =
      str(order == Order::kSize ? "best_fit_size" : "best_fit_lifetime", "/", gap_rule_name(rule));
  result.solve_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace

SolveResult solve_best_fit_size(const Problem& problem, const HeuristicOptions& options) {
  return solve_ordered(problem, Order::kSize, options.gap_rule);
}

SolveResult solve_best_fit_lifetime(const Problem& problem, const HeuristicOptions& options) {
  return solve_ordered(problem, Order::kLifetime, options.gap_rule);
}

SolveResult solve_heuristic(const Problem& problem, const HeuristicOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<GapRule> rules{options.gap_rule};
  if (options.try_all_gap_rules) rules = {GapRule::kSmallestGap, GapRule::kLowestGap};
  SolveResult best;
  SolveCounters total;
  bool first = true;
  for (Order order : {Order::kSize, Order::kLifetime}) {
    for (GapRule rule : rules) {
      SolveResult r = solve_ordered(problem, order, rule);
      total.candidates += r.counters.candidates;
      if (first || r.plan.peak < best.plan.peak) best = std::move(r);
      first = false;
      if (best.status == Status::kOptimal) break;  // nothing can beat the lower bound
    }
    if (best.status == Status::kOptimal) break;
  }
  best.counters = total;
  best.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return best;
}

}  // namespace memo::plan
