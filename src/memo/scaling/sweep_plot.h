// An SVG (core/svg.h) of one or more sweep analyses: optimal lr against batch size on log-log
// axes, the fitted surge and SGD laws as curves, B_noise as a dashed line, a legend. Points at
// the lr grid's edge are drawn hollow (they are bounds). Not a general plotting library.
#pragma once

#include <string>
#include <vector>

#include "memo/scaling/sweep_analysis.h"

namespace memo::scaling {

std::string sweep_svg(const std::vector<SweepAnalysis>& analyses, const std::string& title);

}  // namespace memo::scaling
