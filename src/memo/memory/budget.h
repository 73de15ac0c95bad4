// The device-memory budget: what a run needs on the device (weights, gradients, optimiser state,
// the planned activation arena, the memo strategy's rounding buffers) against --device-memory,
// checked before step 1. A run that does not fit is refused with numbers: the need by part, the
// budget, the shortfall, and what would fit (DESIGN.md section 5, step 1; STYLE.md section 4).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "memo/memory/activation_plan.h"
#include "memo/memory/trace.h"

namespace memo {

struct DeviceNeed {
  int64_t weight_bytes{};  // fp32 parameters
  // Their bf16 working copy under mixed precision (Note [Mixed precision] in model/model.h); 0
  // otherwise.
  int64_t working_weight_bytes{};
  // bf16 storage's widened copies (Note [bf16 storage by conversion] in backend/bf16_storage.h),
  // as the traced micro-batch grew them: device memory outside the arena; 0 otherwise.
  int64_t conversion_scratch_bytes{};
  int64_t gradient_bytes{};         // fp32, one per parameter
  std::string optimizer = "adamw";  // whose state optimizer_bytes counts
  int64_t optimizer_bytes{};        // that optimiser's state tensors (Optimizer::state())
  // The planned arena (the level-2 peak). It holds the offload and memo strategies' rounding
  // buffers too: they are requests of the trace like any other.
  int64_t activation_arena_bytes{};

  // everything but the arena and the conversion scratch, which grow with the sequence
  int64_t fixed_bytes() const;
  int64_t total_bytes() const;
};

// Weights and gradients for `param_numel` fp32 parameters, the named optimiser's state bytes, the
// arena, and the bf16 working weights' bytes under mixed precision.
DeviceNeed device_need(int64_t param_numel, const std::string& optimizer, int64_t optimizer_bytes,
                       int64_t activation_arena_bytes, int64_t working_weight_bytes = 0);

// One line per part, then the total, each in GiB (two decimals) and bytes; for reports.
std::string need_breakdown(const DeviceNeed& need);

// What would fit a budget a run exceeds.
struct FitAdvice {
  int64_t smallest_budget_bytes{};  // the need itself: a --device-memory that fits
  // The longest sequence (same batch) whose shape-scaled plan fits the budget; nullopt when not
  // even one token per sequence fits (the fixed part alone may exceed it). An estimate: it plans
  // scale_trace(trace, other, seq), not a real trace at that length.
  std::optional<int64_t> longest_seq;
};

// Binary search over seq in [1, max_seq] for the longest whose scaled plan (heuristic solver)
// plus `fixed_bytes` plus the conversion scratch fits `budget_bytes`. Assumes the need grows with
// seq. The scratch (bf16 storage's widened copies, 0 without) was measured with each trace:
// `scratch` with trace, `other_scratch` with other (other.seq < trace.seq); between the two it is
// the affine function through them, below other.seq other_scratch (it grows with seq, so that is
// a bound: the advice errs long, never short of what fits).
std::optional<int64_t> longest_fitting_seq(const Trace& trace, const Trace& other,
                                           int64_t fixed_bytes, int64_t scratch,
                                           int64_t other_scratch, int64_t budget_bytes,
                                           int64_t max_seq);

// A size --device-memory accepts, rounded up: "1.24GiB" (to 0.01 GiB) or "13MiB" below 1 GiB.
std::string budget_flag_value(int64_t bytes);

// The refusal: "device memory: needs X (weights .., gradients .., ...), budget is Y (short Z) at
// batch B x seq S; --seq N fits this budget (estimated) or --device-memory M fits".
std::string over_budget_message(const DeviceNeed& need, int64_t budget_bytes, int64_t batch,
                                int64_t seq, const FitAdvice& advice);

}  // namespace memo
