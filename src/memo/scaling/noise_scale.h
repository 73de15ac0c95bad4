// Online gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, App. A.1;
// DESIGN.md section 3) from the micro-batch gradients a step already computes: k micro-batches of
// size b, their squared norms and the squared norm of their mean (B_big = k b). Each step gives
// unbiased estimates of |G|^2 and tr(Sigma); separate EMAs smooth each and B_simple is their
// ratio (never an EMA of ratios, which is biased). Not here: taking the norms (the trainer, before
// clipping and weight decay) or the surge-law B_noise, which B_simple only tracks up to a factor.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace memo::scaling {

// One step's unbiased estimates, from E|g_B|^2 = |G|^2 + tr(Sigma)/B (App. A.1):
//   |G|^2   ~ (B_big |g_big|^2 - b mean_k|g_k|^2) / (B_big - b)
//   tr(Sigma) ~ (mean_k|g_k|^2 - |g_big|^2) / (1/b - 1/B_big)
// tr(Sigma) is per example (or per token): B_simple comes out in the unit of b.
struct NoiseEstimate {
  double g2 = 0.0;     // |G|^2
  double trace = 0.0;  // tr(Sigma)
};
NoiseEstimate estimate_noise(double mean_small_sq_norm, double big_sq_norm, double micro_batch,
                             double big_batch);

struct NoiseScaleOptions {
  double decay = 0.99;  // EMA decay per update (GPT-NeoX uses 0.99, k-diffusion 0.9998)
};

struct NoiseScaleState {   // what a checkpoint saves; restore() puts it back exactly
  double ema_g2 = 0.0;     // EMA of the |G|^2 estimates, not yet debiased
  double ema_trace = 0.0;  // EMA of the tr(Sigma) estimates, not yet debiased
  int64_t updates = 0;     // finite updates so far (debiasing divides by 1 - decay^updates)
  int64_t skipped = 0;     // updates ignored for non-finite norms
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NoiseScaleState, ema_g2, ema_trace, updates, skipped)

class NoiseScaleEstimator {
 public:
  explicit NoiseScaleEstimator(NoiseScaleOptions options = {});  // throws ConfigError on decay
  // One optimiser step: small_sq_norms[k] = |g_k|^2 of the k >= 2 micro-batch gradients (each a
  // mean over micro_batch examples or tokens), big_sq_norm = |mean_k g_k|^2. A step with a
  // non-finite norm is skipped (counted, returns false), as a step the loss scaler skips.
  bool update(const std::vector<double>& small_sq_norms, double big_sq_norm, double micro_batch);
  // The same where the micro-batches count different numbers of examples or tokens (a loss mask):
  // micro_batch is the harmonic mean of their counts (E mean_k |g_k|^2 = |G|^2 + tr / that mean)
  // and big_batch the step's whole count.
  bool update(const std::vector<double>& small_sq_norms, double big_sq_norm, double micro_batch,
              double big_batch);
  // Debiased EMAs; nullopt before the first update.
  std::optional<double> g2() const;
  std::optional<double> trace() const;
  // EMA(trace) / EMA(g2) (debiasing cancels); nullopt before the first update or while the
  // EMA of |G|^2 is not positive (the gradient is still within the noise).
  std::optional<double> b_simple() const;
  const NoiseScaleState& state() const { return state_; }
  void restore(const NoiseScaleState& state) { state_ = state; }
  const NoiseScaleOptions& options() const { return options_; }

 private:
  NoiseScaleOptions options_;
  NoiseScaleState state_;
};

}  // namespace memo::scaling
