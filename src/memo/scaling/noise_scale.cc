#include "memo/scaling/noise_scale.h"

#include <cmath>

#include "memo/core/error.h"

namespace memo::scaling {

NoiseEstimate estimate_noise(double mean_small_sq_norm, double big_sq_norm, double micro_batch,
                             double big_batch) {
  if (!(micro_batch > 0.0 && big_batch > micro_batch))
    throw ConfigError(str("noise scale needs 0 < micro-batch < step batch, got micro-batch ",
                          micro_batch, " and step batch ", big_batch,
                          "; use at least 2 micro-batches per step"));
  return {(big_batch * big_sq_norm - micro_batch * mean_small_sq_norm) / (big_batch - micro_batch),
          (mean_small_sq_norm - big_sq_norm) / (1.0 / micro_batch - 1.0 / big_batch)};
}

NoiseScaleEstimator::NoiseScaleEstimator(NoiseScaleOptions options) : options_(options) {
  if (!(options_.decay >= 0.0 && options_.decay < 1.0))
    throw ConfigError(str("noise-scale EMA decay ", options_.decay, " is outside [0, 1)"));
}

bool NoiseScaleEstimator::update(const std::vector<double>& small_sq_norms, double big_sq_norm,
                                 double micro_batch) {
  return update(small_sq_norms, big_sq_norm, micro_batch,
                double(small_sq_norms.size()) * micro_batch);
}

bool NoiseScaleEstimator::update(const std::vector<double>& small_sq_norms, double big_sq_norm,
                                 double micro_batch, double big_batch) {
  const size_t k = small_sq_norms.size();
  if (k < 2)
    throw ConfigError(str("noise scale needs at least 2 micro-batch gradients per step, got ", k,
                          "; raise the batch to 2 or more micro-batches"));
  double mean_small = 0.0;  // double: the norms of a large model span many orders of magnitude
  for (double s : small_sq_norms) mean_small += s / double(k);
  if (!std::isfinite(mean_small) || !std::isfinite(big_sq_norm)) {
    ++state_.skipped;
    return false;
  }
  const NoiseEstimate e = estimate_noise(mean_small, big_sq_norm, micro_batch, big_batch);
  const double d = options_.decay;
  state_.ema_g2 = d * state_.ema_g2 + (1.0 - d) * e.g2;
  state_.ema_trace = d * state_.ema_trace + (1.0 - d) * e.trace;
  ++state_.updates;
  return true;
}

std::optional<double> NoiseScaleEstimator::g2() const {
  if (state_.updates == 0) return std::nullopt;
  return state_.ema_g2 / (1.0 - std::pow(options_.decay, double(state_.updates)));
}

std::optional<double> NoiseScaleEstimator::trace() const {
  if (state_.updates == 0) return std::nullopt;
  return state_.ema_trace / (1.0 - std::pow(options_.decay, double(state_.updates)));
}

std::optional<double> NoiseScaleEstimator::b_simple() const {
  if (state_.updates == 0 || !(state_.ema_g2 > 0.0)) return std::nullopt;
  return state_.ema_trace / state_.ema_g2;
}

}  // namespace memo::scaling
