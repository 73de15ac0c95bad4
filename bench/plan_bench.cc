// Planner benchmark: random transformer-like request sequences of 30, 100 and 300 buffers. For
// each: the live-bytes lower bound, each heuristic's peak and its gap above the bound, the MIP's
// peak, proven bound and time, and the PyTorch-style caching allocator's peak reserved bytes,
// with ratios to the greedy-by-size baseline from the same run. Single-threaded, one repetition
// (the planners are deterministic; only the MIP's time varies).
//   usage: plan_bench [mip_seconds=10] [instances_per_size=3]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "memo/memory/plan/dynamic_sim.h"
#include "memo/memory/plan/heuristic.h"
#include "memo/memory/plan/mip.h"
#include "memo/memory/plan/validate.h"

namespace {

using namespace memo::plan;
constexpr double kMiB = 1024.0 * 1024.0;

// A layer-like trace: T = 4096 tokens, C = 4096, F = 11008, H = 32 heads, Hkv = 8, D = 128, bf16.
// Buffer i is requested at step i; most die within a few requests (transients), some live for a
// quarter of the trace (saved for a later op), a few to the end (skeletal / cross-layer).
Problem transformer_like(int n, std::uint32_t seed) {
  const Bytes T = 4096, C = 4096, F = 11008, H = 32, Hkv = 8, D = 128, bf16 = 2, fp32 = 4;
  const Bytes sizes[] = {T * C * bf16, T * F * bf16,     T * Hkv * D * bf16,
                         T * H * fp32, T * fp32,         C * fp32,
                         T * C * fp32, 3 * T * C * bf16, T * 2 * F * bf16 / 4};
  const double weights[] = {30, 20, 15, 8, 8, 4, 5, 5, 5};
  std::mt19937 rng(seed);
  std::discrete_distribution<int> pick(std::begin(weights), std::end(weights));
  std::uniform_real_distribution<double> u(0, 1);
  Problem p;
  for (int i = 0; i < n; ++i) {
    const double r = u(rng);
    Step life = 1 + Step(rng() % 4);
    if (r > 0.70) life = 4 + Step(rng() % std::max(1, n / 4));
    if (r > 0.95) life = n - i + 1;
    const Bytes jitter = Bytes(rng() % 4) * 512;  // odd sizes: not every request is a round number
    p.buffers.push_back(
        Buffer{memo::str("t", i), sizes[pick(rng)] + jitter, 256, Step(i), Step(i) + life});
  }
  return p;
}

std::size_t pairs(const Problem& p) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < p.buffers.size(); ++i)
    for (std::size_t j = i + 1; j < p.buffers.size(); ++j)
      count += alive_together(p.buffers[i], p.buffers[j]);
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  const double mip_seconds = argc > 1 ? std::atof(argv[1]) : 10.0;
  const int instances = argc > 2 ? std::atoi(argv[2]) : 3;
  std::printf(
      "plan_bench: transformer-like traces, T=4096 C=4096 F=11008, align 256 B; threads 1; reps 1;"
      " MIP limit %.1f s\n",
      mip_seconds);
  std::printf(
      "gap = (peak - lower bound) / lower bound; x_greedy = peak / greedy-by-size peak\n\n");
  std::printf("%4s %4s %6s %9s | %7s %7s %7s | %9s %7s %9s %8s %6s %7s %-10s | %9s %9s\n", "n",
              "seed", "pairs", "LB MiB", "size%", "life%", "heur%", "MIP MiB", "MIP%", "bnd MiB",
              "x_greedy", "time", "nodes", "status", "dyn MiB", "dyn x_gr");
  double sum_mip_ratio = 0, sum_dyn_ratio = 0;
  int rows = 0;
  for (int n : {30, 100, 300}) {
    for (int s = 0; s < instances; ++s) {
      const std::uint32_t seed = std::uint32_t(1000 * n + s);
      const Problem p = transformer_like(n, seed);
      const SolveResult size = solve_best_fit_size(p);
      const SolveResult life = solve_best_fit_lifetime(p);
      const SolveResult heur = solve_heuristic(p);
      MipOptions options;
      options.time_limit_seconds = mip_seconds;
      const SolveResult mip = solve_mip(p, options);
      for (const SolveResult* r : {&size, &life, &heur, &mip}) validate(p, r->plan);
      const DynamicSimStats dyn = simulate_dynamic(p);
      const double greedy = double(size.plan.peak);
      std::printf(
          "%4d %4u %6zu %9.1f | %6.2f%% %6.2f%% %6.2f%% | %9.1f %6.2f%% %9.1f %8.3f %5.2fs %7lld "
          "%-10s | %9.1f %9.3f\n",
          n, seed, pairs(p), double(heur.lower_bound) / kMiB,
          gap_percent(size.plan.peak, size.lower_bound),
          gap_percent(life.plan.peak, life.lower_bound),
          gap_percent(heur.plan.peak, heur.lower_bound), double(mip.plan.peak) / kMiB,
          gap_percent(mip.plan.peak, heur.lower_bound), double(mip.lower_bound) / kMiB,
          double(mip.plan.peak) / greedy, mip.solve_seconds, (long long)mip.counters.nodes,
          status_name(mip.status), double(dyn.peak_reserved_bytes) / kMiB,
          double(dyn.peak_reserved_bytes) / greedy);
      sum_mip_ratio += double(mip.plan.peak) / greedy;
      sum_dyn_ratio += double(dyn.peak_reserved_bytes) / greedy;
      ++rows;
    }
  }
  std::printf(
      "\nmean over %d instances: MIP peak / greedy peak = %.3f, caching-allocator reserved / "
      "greedy peak = %.3f\n",
      rows, sum_mip_ratio / rows, sum_dyn_ratio / rows);
  return 0;
}
