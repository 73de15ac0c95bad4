// Device bytes over one training step, drawn as an SVG (core/svg.h): for each strategy's plan, the
// live bytes (model state + live activations) and the planned arena's high-water mark against the
// request index, with the plan's peak and the budget as horizontal lines. For `memo plan
// --timeline`; no plotting library, no interactivity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/memory/activation_plan.h"

namespace memo {

struct TimelineSeries {
  std::string name;                 // the strategy ("keep")
  int64_t fixed_bytes{};            // model state on the device, added to every point
  int64_t plan_peak_bytes{};        // fixed + arena
  std::vector<int64_t> live_bytes;  // [request] fixed + aligned bytes live right after it
  std::vector<int64_t> top_bytes;   // [request] fixed + highest planned arena byte in use
};

TimelineSeries timeline_series(const std::string& name, const ActivationPlan& plan,
                               int64_t fixed_bytes);

// An SVG document; budget_bytes 0 draws no budget line.
std::string timeline_svg(const std::vector<TimelineSeries>& series, int64_t budget_bytes,
                         const std::string& title);

}  // namespace memo
