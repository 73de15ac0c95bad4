// SVGs (core/svg.h) of memo eval's long-context evaluations, in the drawing style of
// train/log_plot.h: the loss by position within the window, several checkpoints overlaid, and
// the passkey / needle accuracy as a length x depth heatmap. Not a general plotter.
#pragma once

#include <string>
#include <vector>

#include "memo/train/evaluate.h"

namespace memo {

struct PositionCurve {
  std::string name;  // legend label: the checkpoint
  std::vector<PositionLoss> buckets;
};

// Loss over position (each bucket at its middle), one line per curve. No buckets: DataError.
std::string loss_by_position_svg(const std::vector<PositionCurve>& curves,
                                 const std::string& title);

// accuracy[l][d] in [0, 1] for lengths[l] (tokens) and depths[d] (fractions of the context): one
// cell each, from red (0) to green (1), the value written in it.
std::string retrieval_heatmap_svg(const std::vector<int64_t>& lengths,
                                  const std::vector<double>& depths,
                                  const std::vector<std::vector<double>>& accuracy,
                                  const std::string& title);

}  // namespace memo
