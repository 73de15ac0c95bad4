// Test helpers for the planner: seeded random problems and an independent brute-force optimum.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "memo/memory/plan/problem.h"

namespace memo::plan::testing {

// n buffers over about 2n steps, sizes 1..16 KiB-ish in 64-byte multiples (some not multiples of
// the alignment), lifetimes 1..n steps; capacity unlimited. Deterministic in seed.
inline Problem random_problem(int n, std::uint32_t seed, Bytes align = 64) {
  std::mt19937 rng(seed);
  Problem p;
  for (int i = 0; i < n; ++i) {
    const Step begin = std::uniform_int_distribution<Step>(0, 2 * n)(rng);
    const Step life = std::uniform_int_distribution<Step>(1, n)(rng);
    const Bytes size = std::uniform_int_distribution<Bytes>(1, 16)(rng) * 1000;
    p.buffers.push_back(Buffer{str("b", i), size, align, begin, begin + life});
  }
  return p;
}

// Greedy by size puts b3 (10048 B) at 0, then b1 on top of it, and b2 ends up above b1: 21120 B.
// The optimum is 20032 B (= lower bound at step 7: b0 + b2): b1 at 0, b3 at 7040, b2 at 16000.
//   step:  2  3  4  5  6  7
//   b0                    [=)   16000 B
//   b1    [==========)           7000 B
//   b2          [==========)     4000 B
//   b3       [=)                10000 B
inline Problem greedy_trap() {
  return Problem{{{"b0", 16000, 64, 7, 8},
                  {"b1", 7000, 64, 2, 6},
                  {"b2", 4000, 64, 4, 8},
                  {"b3", 10000, 64, 3, 4}},
                 0};
}

// The optimum peak by exhaustive search over placement orders. Why it is exact: take an optimal
// plan and place its buffers in order of offset, each at the LOWEST aligned offset where it does
// not overlap the buffers placed before it that are alive at the same time. Its optimal offset is
// such a position (everything alive with it and placed earlier lies below it), so each buffer ends
// no higher than in the optimal plan. Hence the minimum over all n! orders is the optimum.
// Deliberately shares no code with the library: offsets tried are 0 and the tops of the placed
// buffers, rounded up to the alignment.
inline Bytes brute_force_peak(const Problem& p) {
  const std::size_t n = p.buffers.size();
  const auto bytes = [&](std::size_t i) {
    const Buffer& b = p.buffers[i];
    return (b.size + b.align - 1) / b.align * b.align;
  };
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Bytes best = -1;
  do {
    std::vector<Bytes> offset(n, -1);
    Bytes peak = 0;
    for (std::size_t i : order) {
      const Buffer& b = p.buffers[i];
      std::vector<Bytes> tries{0};
      for (std::size_t j = 0; j < n; ++j)
        if (offset[j] >= 0)
          tries.push_back((offset[j] + bytes(j) + b.align - 1) / b.align * b.align);
      std::sort(tries.begin(), tries.end());
      for (Bytes x : tries) {
        bool clash = false;
        for (std::size_t j = 0; j < n && !clash; ++j) {
          const Buffer& o = p.buffers[j];
          clash = offset[j] >= 0 && b.begin < o.end && o.begin < b.end &&
                  x < offset[j] + bytes(j) && offset[j] < x + bytes(i);
        }
        if (!clash) {
          offset[i] = x;
          break;
        }
      }
      peak = std::max(peak, offset[i] + bytes(i));
    }
    if (best < 0 || peak < best) best = peak;
  } while (std::next_permutation(order.begin(), order.end()));
  return std::max<Bytes>(best, 0);
}

}  // namespace memo::plan::testing
