// Greedy placement in a fixed order. See placement.h.
#include "memo/memory/plan/placement.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace memo::plan {

const char* gap_rule_name(GapRule rule) {
  return rule == GapRule::kSmallestGap ? "smallest_gap" : "lowest_gap";
}

namespace {

// The buffers of nonzero size by lifetime, to find those alive with a given one without scanning
// them all: grouped by lifetime length into classes [2^c, 2^(c+1)), each sorted by begin. One of
// class c alive with [a, b) begins in (a - 2^(c+1), b): a binary search finds that run. Its
// buffers that end by a are among those alive at step a - 2^c, so a placement scans about the
// buffers alive with it or within a lifetime before it, not every placed one (a pipeline
// stage's whole step has 10^5 buffers).
class LifetimeIndex {
 public:
  explicit LifetimeIndex(const std::vector<Buffer>& buffers) {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const Buffer& b = buffers[i];
      if (aligned_size(b) == 0) continue;
      // (in unsigned arithmetic: a lifetime may span more than half the int64 steps)
      const auto c = std::size_t(std::bit_width(std::uint64_t(b.end) - std::uint64_t(b.begin)) - 1);
      if (classes_.size() <= c) classes_.resize(c + 1);
      classes_[c].push_back({b.begin, b.end, i});
    }
    for (std::vector<Entry>& c : classes_)
      std::sort(c.begin(), c.end(), [](const Entry& x, const Entry& y) {
        return std::pair(x.begin, x.index) < std::pair(y.begin, y.index);
      });
  }

  // f(index) for each buffer of nonzero size alive on some step of [a, b).
  template <class F>
  void for_each_alive_with(Step a, Step b, F&& f) const {
    for (std::size_t c = 0; c < classes_.size(); ++c) {
      const std::vector<Entry>& v = classes_[c];
      // a - 2^(c+1) + 1, or the least step where that would fall below it
      constexpr Step kLeast = std::numeric_limits<Step>::min();
      const Step first = c >= 62 || a < kLeast + (Step(2) << c) ? kLeast : a - (Step(2) << c) + 1;
      auto it = std::lower_bound(v.begin(), v.end(), first,
                                 [](const Entry& e, Step s) { return e.begin < s; });
      for (; it != v.end() && it->begin < b; ++it)
        if (it->end > a) f(it->index);
    }
  }

 private:
  struct Entry {
    Step begin, end;
    std::size_t index;
  };
  std::vector<std::vector<Entry>> classes_;
};

}  // namespace

Plan place_in_order(const Problem& problem, const std::vector<std::size_t>& order, GapRule rule,
                    std::int64_t* candidates) {
  const std::size_t n = problem.buffers.size();
  Plan plan{std::vector<Bytes>(n, 0), 0};
  const LifetimeIndex alive(problem.buffers);
  std::vector<Bytes> sizes(n);
  for (std::size_t i = 0; i < n; ++i) sizes[i] = aligned_size(problem.buffers[i]);
  std::vector<char> placed(n, 0);
  std::vector<std::pair<Bytes, Bytes>>
      taken;  // [lo, hi) byte ranges of placed buffers alive with b
  for (std::size_t i : order) {
    const Buffer& b = problem.buffers[i];
    const Bytes size = sizes[i];
    taken.clear();
    alive.for_each_alive_with(b.begin, b.end, [&](std::size_t j) {
      if (placed[j]) taken.emplace_back(plan.offsets[j], plan.offsets[j] + sizes[j]);
    });
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
    placed[i] = 1;
  }
  return plan;
}

}  // namespace memo::plan
