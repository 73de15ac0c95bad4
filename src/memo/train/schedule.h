// Learning-rate schedule: linear warm-up from 0 to the peak over `warmup` steps, then cosine
// decay to min_lr at the last step. Steps count from 1 (the first optimiser step).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace memo {

struct LrSchedule {
  double peak_lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  double at(int64_t step) const {
    if (warmup_steps > 0 && step <= warmup_steps)
      return peak_lr * double(step) / double(warmup_steps);
    const int64_t decay_steps = total_steps - warmup_steps;
    if (decay_steps <= 0) return peak_lr;
    const double progress = std::clamp(double(step - warmup_steps) / double(decay_steps), 0.0, 1.0);
    constexpr double kPi = 3.14159265358979323846;
    return min_lr + 0.5 * (peak_lr - min_lr) * (1.0 + std::cos(kPi * progress));
  }
};

}  // namespace memo
