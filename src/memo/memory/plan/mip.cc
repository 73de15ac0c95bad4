// The MIP planner. See mip.h.
//
// Note [MIP scaling and repair]
// Units: every aligned size and every align is a multiple of g = gcd(aligns, aligned sizes), and
// some optimal plan has every offset a multiple of g (stack each buffer on one below it). So the
// model counts in units of g: smaller numbers, integral data, and M is declared integer, which
// lets CBC round its bound up. A buffer whose align exceeds g gets an integer column k_i with
// A_i = (align_i / g) k_i; the others keep a continuous A_i.
// Symmetry: turning a plan upside down (A_i -> M - A_i - S_i) gives another plan of the same peak,
// and it keeps offsets aligned when every align equals g. Then we fix z = 0 for the alive-together
// pair with the largest combined size, halving the search tree.
// Repair: CBC's offsets satisfy the constraints only up to its tolerances (z_ij may be 1e-6 off a
// whole number, times U). So we keep only the order: sort buffers by the midpoint of [A_i, A_i +
// S_i) (for a pair alive together, the lower one has the lower midpoint even with slack below one
// unit), then place them in that order at the lowest aligned offset where they fit (placement.h).
// By induction each offset is at most A_i, so the repaired peak is at most M, and it is exact.
#include "memo/memory/plan/mip.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "memo/memory/plan/cbc_model.h"
#include "memo/memory/plan/placement.h"

namespace memo::plan {
namespace {

struct Pair {
  std::size_t i, j;  // i < j, alive together, both with aligned size > 0
  int z;             // column of z_ij
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Status status_for(const Problem& problem, Bytes peak, Bytes bound, bool timed_out) {
  if (problem.capacity > 0 && peak > problem.capacity)
    return timed_out ? Status::kTimeout : Status::kInfeasible;
  if (peak <= bound) return Status::kOptimal;
  return timed_out ? Status::kTimeout : Status::kFeasible;
}

// The buffers the model places and the unit g it counts in (see Note [MIP scaling and repair]).
struct Units {
  std::vector<std::size_t> active;  // buffers that occupy bytes; the others fit anywhere
  Bytes g = 0;
  bool uniform_align = true;  // every active align equals g: the upside-down plan is aligned
};

Units units_of(const std::vector<Buffer>& bs) {
  Units u;
  for (std::size_t i = 0; i < bs.size(); ++i) {
    if (aligned_size(bs[i]) == 0) continue;
    u.active.push_back(i);
    u.g = std::gcd(u.g, std::gcd(bs[i].align, aligned_size(bs[i])));
  }
  for (std::size_t i : u.active) u.uniform_align = u.uniform_align && bs[i].align == u.g;
  return u;
}

// Columns: x_i (A_i in units, or k_i when align_i > g), then M in [lower, upper], then one z per
// pair alive together; rows: A_i + S_i <= M, and the big-M rows that keep each pair apart.
struct Formulation {
  Formulation(const std::vector<Buffer>& bs, const Units& u, Bytes upper, Bytes lower, bool verbose)
      : model(verbose), x_col(bs.size(), -1), coef(bs.size(), 1.0), units(bs.size(), 0.0) {
    for (std::size_t i : u.active) {
      units[i] = double(aligned_size(bs[i]) / u.g);
      coef[i] = double(bs[i].align / u.g);
      const double top = std::floor((double(upper) - units[i]) / coef[i]);
      x_col[i] = model.add_column(0.0, top, 0.0, bs[i].align > u.g);
    }
    m_col = model.add_column(double(lower), double(upper), 1.0, true);
    for (std::size_t i : u.active)
      model.add_row({x_col[i], m_col}, {coef[i], -1.0}, 'L', -units[i]);
    add_pairs(bs, u.active, upper);
  }

  CbcModel model;
  std::vector<int> x_col;
  std::vector<double> coef, units;
  int m_col = -1;
  std::vector<Pair> pairs;

 private:
  void add_pairs(const std::vector<Buffer>& bs, const std::vector<std::size_t>& active,
                 Bytes upper) {
    for (std::size_t a = 0; a < active.size(); ++a) {
      for (std::size_t b = a + 1; b < active.size(); ++b) {
        const std::size_t i = active[a], j = active[b];
        if (!alive_together(bs[i], bs[j])) continue;
        const int z = model.add_column(0.0, 1.0, 0.0, true);
        const double u = double(upper);
        model.add_row({x_col[i], x_col[j], z}, {coef[i], -coef[j], -u}, 'L', -units[i]);
        model.add_row({x_col[j], x_col[i], z}, {coef[j], -coef[i], u}, 'L', u - units[j]);
        pairs.push_back({i, j, z});
      }
    }
  }
};

// Fixes z = 0 for the pair with the largest combined size, and turns the warm start upside down
// if it disagrees (see Note [MIP scaling and repair]).
void fix_largest_pair(Formulation& f, const std::vector<Buffer>& bs, const Units& u, Bytes peak,
                      std::vector<Bytes>& start) {
  const auto weight = [&](const Pair& p) { return f.units[p.i] + f.units[p.j]; };
  const Pair& fixed =
      *std::max_element(f.pairs.begin(), f.pairs.end(),
                        [&](const Pair& p, const Pair& q) { return weight(p) < weight(q); });
  f.model.set_upper(fixed.z, 0.0);
  if (start[fixed.i] > start[fixed.j])
    for (std::size_t i : u.active) start[i] = peak - start[i] - aligned_size(bs[i]);
}

// The heuristic's plan, with offsets `start` and peak `peak`, as CBC's first incumbent.
void set_warm_start(Formulation& f, const Units& u, const std::vector<Bytes>& start, Bytes peak) {
  std::vector<int> cols;
  std::vector<double> values;
  for (std::size_t i : u.active)
    cols.push_back(f.x_col[i]), values.push_back(double(start[i] / u.g) / f.coef[i]);
  cols.push_back(f.m_col), values.push_back(double(peak / u.g));
  for (const Pair& p : f.pairs)
    cols.push_back(p.z), values.push_back(start[p.i] < start[p.j] ? 0.0 : 1.0);
  f.model.set_mip_start(cols, values);
}

void set_limits(CbcModel& model, const MipOptions& options,
                std::chrono::steady_clock::time_point t0) {
  model.set_time_limit(std::max(0.0, options.time_limit_seconds - seconds_since(t0)));
  model.set_allowable_gap(0.5);  // M is integral in units: a gap below 1 proves optimality
  model.set_allowable_fraction_gap(options.relative_gap);
  // Cuts off: the big-M rows give an LP bound of about the lower bound whatever the cuts, and on
  // plan_bench CBC's cut loop spent the whole time limit at the root (300 buffers: 16.7 s for a
  // 10 s limit, vs 10.7 s) and kept a 30-buffer instance from being proven (timeout at 10 s vs
  // optimal in 6.2 s). cbc_parameters can turn them back on.
  model.set_parameter("cuts", "off");
  // Preprocessing off: CBC 2.10 (Debian 12) crashes in CglPreProcess::postProcess when the time
  // limit runs out during its preprocessing (plan_bench at limits of 1-2 s died in it; coin-or/Cbc
  // issue 168).
  model.set_parameter("preprocess", "off");
  for (const auto& [name, value] : options.cbc_parameters) model.set_parameter(name, value);
}

// CBC's solution repaired (see Note [MIP scaling and repair]); it replaces `best`'s plan when its
// peak is lower.
void adopt_repaired(SolveResult& best, const Problem& problem, const Formulation& f,
                    const Units& u) {
  const std::vector<double> x = f.model.solution();
  std::vector<std::size_t> order(problem.buffers.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<double> mid(problem.buffers.size(), -1.0);  // empty buffers first: they fit anywhere
  for (std::size_t i : u.active) mid[i] = x[f.x_col[i]] * f.coef[i] + f.units[i] / 2;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return mid[a] < mid[b]; });
  std::int64_t candidates = 0;
  Plan repaired = place_in_order(problem, order, GapRule::kLowestGap, &candidates);
  best.counters.candidates += candidates;
  if (repaired.peak < best.plan.peak) {
    best.plan = std::move(repaired);
    best.solver = "mip";
  }
}

// The lower bound CBC proved, in bytes (live_bound when it proved none).
Bytes proven_bound(const CbcModel& model, Bytes live_bound, Bytes upper, Bytes g) {
  Bytes bound = live_bound;
  if (model.proven_infeasible()) {
    bound = (upper + 1) * g;  // no plan with M <= U exists
  } else {
    const double cbc_bound = model.best_bound();
    if (std::isfinite(cbc_bound) && cbc_bound < 1e18)
      bound = Bytes(std::ceil(cbc_bound - 1e-6)) * g;
  }
  return bound;
}

}  // namespace

SolveResult solve_mip(const Problem& problem, const MipOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  check_problem(problem);
  SolveResult best = solve_heuristic(problem, options.heuristic);
  const Bytes live_bound = best.lower_bound;
  const auto finish = [&](Bytes bound, bool timed_out) {
    best.lower_bound = std::max(live_bound, bound);
    best.status = status_for(problem, best.plan.peak, best.lower_bound, timed_out);
    if (best.status == Status::kOptimal) best.lower_bound = best.plan.peak;
    best.solve_seconds = seconds_since(t0);
    return best;
  };
  if (problem.capacity > 0 && live_bound > problem.capacity) return finish(live_bound, false);
  const auto close_enough = [&](Bytes peak, Bytes bound) {
    return double(peak - bound) <= options.relative_gap * double(bound);
  };
  if (options.stop_at_lower_bound && close_enough(best.plan.peak, live_bound))
    return finish(live_bound, false);

  const Units u = units_of(problem.buffers);
  if (u.active.empty()) return finish(live_bound, false);
  const bool heuristic_fits = problem.capacity == 0 || best.plan.peak <= problem.capacity;
  const Bytes upper = (heuristic_fits ? best.plan.peak : problem.capacity) / u.g;  // U, in units
  const Bytes lower = (live_bound + u.g - 1) / u.g;
  Formulation f(problem.buffers, u, upper, lower, options.verbose);
  best.counters.nodes = 0;

  std::vector<Bytes> start = best.plan.offsets;
  if (options.break_symmetry && u.uniform_align && !f.pairs.empty())
    fix_largest_pair(f, problem.buffers, u, best.plan.peak, start);
  if (options.warm_start && heuristic_fits) set_warm_start(f, u, start, best.plan.peak);
  set_limits(f.model, options, t0);
  f.model.minimize();
  best.counters.nodes = f.model.nodes();
  best.counters.iterations = f.model.iterations();

  if (f.model.has_solution()) adopt_repaired(best, problem, f, u);
  const Bytes bound = proven_bound(f.model, live_bound, upper, u.g);
  const bool timed_out = f.model.time_limit_reached() && !f.model.proven_optimal();
  return finish(bound, timed_out);
}

}  // namespace memo::plan
