// Greedy placement in a fixed order. See placement.h.
#include "memo/memory/plan/placement.h"

#include <algorithm>
#include <utility>

namespace memo::plan {

const char* gap_rule_name(GapRule rule) {
  return rule == GapRule::kSmallestGap ? "smallest_gap" : "lowest_gap";
}

Plan place_in_order(const Problem& problem, const std::vector<std::size_t>& order, GapRule rule,
                    std::int64_t* candidates) {
  const std::size_t n = problem.buffers.size();
  Plan plan{std::vector<Bytes>(n, 0), 0};
  // the placed buffers of nonzero size, as arrays the scan below reads in order (every placement
  // scans them all: a pipeline stage's step has 10^5 buffers)
  struct Placed {
    Step begin, end;
    Bytes lo, hi;
  };
  std::vector<Placed> placed;
  placed.reserve(n);
  std::vector<std::pair<Bytes, Bytes>>
      taken;  // [lo, hi) byte ranges of placed buffers alive with b
  for (std::size_t i : order) {
    const Buffer& b = problem.buffers[i];
    const Bytes size = aligned_size(b);
    taken.clear();
    for (const Placed& p : placed)
      if (p.begin < b.end && b.begin < p.end) taken.emplace_back(p.lo, p.hi);
    std::sort(taken.begin(), taken.end());
    // Walk the gaps between taken ranges from the bottom. `cur` is the top of everything below.
    const auto round_up = [&](Bytes x) { return (x + b.align - 1) / b.align * b.align; };
    Bytes cur = 0, best_offset = -1, best_gap = 0;
    for (const auto& [lo, hi] : taken) {
      const Bytes x = round_up(cur);
      if (x + size <= lo) {
        ++*candidates;
        const Bytes gap = lo - cur;
        if (best_offset < 0 || gap < best_gap) best_offset = x, best_gap = gap;
        if (rule == GapRule::kLowestGap) break;
      }
      cur = std::max(cur, hi);
    }
    if (best_offset < 0) {
      ++*candidates;
      best_offset = round_up(cur);
    }
    plan.offsets[i] = best_offset;
    plan.peak = std::max(plan.peak, best_offset + size);
    if (size > 0) placed.push_back({b.begin, b.end, best_offset, best_offset + size});
  }
  return plan;
}

}  // namespace memo::plan
