// The static memory planner's vocabulary: buffers with sizes and lifetimes (a Problem), offsets
// for them (a Plan), and what a solver returns (a SolveResult). This is offline dynamic storage
// allocation (DESIGN.md section 2): place every buffer at an offset so that buffers alive at the
// same time do not overlap, minimising the peak. Pure data and a few pure functions; no solver.
//
// Data flows one way:  Problem -> solve_*(problem, options) -> SolveResult -> validate(problem,
// plan)
//
// Note [Bi-level planning]
// The solvers and the validator do not know which level they plan; a caller builds two kinds of
// Problem from the traced request sequence (the MEMO paper's bi-level planning, arXiv 2407.12117):
//   level 1: the transient buffers of ONE layer's forward (and, separately, its backward), times
//            in that pass's request order. Its plan's offsets are reused by every layer; its
//            peak is the size of the layer's block.
//   level 2: the whole iteration, where each layer's forward or backward is ONE buffer of its
//            level-1 peak (a pseudo malloc/free pair), beside the embedding, head, loss and the
//            tensors that cross layers. A level-1 buffer's address is then
//            level-2 offset of its block + level-1 offset inside the block.
//   time ->   0   1   2   3   4   5
//   fwd L0   [=======)                 one level-2 buffer of size P_fwd
//   fwd L1           [=======)         reuses the same level-1 offsets inside its block
//   hidden   [===================)     a cross-layer tensor, planned beside the blocks
// Give a block buffer the largest alignment of the buffers it holds, so their offsets stay aligned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/error.h"

namespace memo::plan {

// Bytes and Step are plain integers: the solvers do arithmetic on them everywhere, and a wrapper
// type would cost readability there. Units live in these names instead (STYLE.md section 2).
using Bytes = std::int64_t;  // a byte count or byte offset
using Step = std::int64_t;   // a position in the request sequence (time)
// A buffer's position in Problem::buffers. A distinct type because it is never arithmetic.
enum class BufferId : std::int32_t {};
inline std::size_t index(BufferId id) { return static_cast<std::size_t>(id); }

// Thrown for a malformed problem or a plan that breaks a rule (see validate.h).
class PlanError : public Error {
  using Error::Error;
};

// One allocation: `size` bytes, aligned to `align`, alive on [begin, end) in request order.
struct Buffer {
  std::string name;  // non-empty; names the buffer in every error message
  Bytes size{};      // requested bytes, >= 0; the planner rounds it up to a multiple of align
  Bytes align{64};   // offset alignment in bytes, > 0
  Step begin{};      // first step alive
  Step end{};        // first step dead; end > begin
};

struct Problem {
  std::vector<Buffer> buffers;
  Bytes capacity{};  // largest allowed peak in bytes; 0 = unlimited
};

// offsets[i] is the byte offset of buffers[i] in one arena of `peak` bytes.
struct Plan {
  std::vector<Bytes> offsets;
  Bytes peak{};  // max over buffers of offset + aligned size (0 for no buffers)
};

enum class Status {
  kOptimal,     // plan.peak equals a proven lower bound on the optimum
  kFeasible,    // plan fits the capacity; optimality not proven
  kInfeasible,  // no plan within capacity found; plan is the best found (peak > capacity).
                // Proven infeasible when lower_bound > capacity.
  kTimeout,     // the time limit ended the search; plan is the best found (may exceed capacity)
};
const char* status_name(Status status);

struct SolveCounters {
  std::int64_t nodes{};       // branch-and-bound nodes (exact solvers)
  std::int64_t iterations{};  // LP iterations (MIP)
  std::int64_t candidates{};  // placements tried: gaps examined by the heuristics
};

struct SolveResult {
  Status status{Status::kFeasible};
  Plan plan;
  Bytes lower_bound{};  // proven: no plan has a smaller peak; >= lower_bound(problem)
  SolveCounters counters;
  double solve_seconds{};  // wall time; for reports only, never for decisions
  std::string solver;      // which solver produced `plan` ("best_fit_size", "mip", ...)
};

// size rounded up to a multiple of align: the bytes a buffer occupies in the arena.
Bytes aligned_size(const Buffer& buffer);

// Throws PlanError naming the buffer if a field is out of range (see Buffer) or capacity < 0.
void check_problem(const Problem& problem);

// The largest sum of aligned sizes alive at one step: no plan's peak is smaller.
Bytes lower_bound(const Problem& problem);

// Whether two buffers' lifetimes [begin, end) intersect.
inline bool alive_together(const Buffer& a, const Buffer& b) {
  return a.begin < b.end && b.begin < a.end;
}

// How far a peak is above a lower bound, in percent of the bound: 100 (peak - bound) / bound.
// This is the fragmentation a plan leaves. 0 when bound is 0.
double gap_percent(Bytes peak, Bytes lower_bound);

}  // namespace memo::plan
