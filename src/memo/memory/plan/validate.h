// The independent check every plan passes before it is used: a sweep over time that shares no
// code with any solver, so a solver bug cannot hide behind the same bug here
// (tests/memory/plan/validate_test.cc checks it against every pair on random plans).
#pragma once

#include "memo/memory/plan/problem.h"

namespace memo::plan {

// Throws PlanError unless: one offset per buffer; every offset is >= 0 and a multiple of its
// buffer's align; offset + size rounded up to align <= plan.peak; plan.peak <= capacity (when
// capacity > 0); and no two buffers alive at the same step overlap in bytes. An overlap message
// names both buffers, their byte ranges and their lifetimes.
void validate(const Problem& problem, const Plan& plan);

}  // namespace memo::plan
