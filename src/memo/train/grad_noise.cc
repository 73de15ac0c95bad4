#include "memo/train/grad_noise.h"

#include <algorithm>

#include "memo/core/error.h"
#include "memo/optim/checks.h"  // kParallelMinNumel

namespace memo {

namespace {

constexpr int64_t kChunk = int64_t(1) << 14;  // elements per partial sum: fixed, so thread-independent
constexpr int kLanes = 8;                     // independent double accumulators: vectorisable, no reassociation

enum class Pass { kFirst, kMiddle, kLast };

// Returns sum g^2 (double) and, by `pass`: kFirst sum = g, g = 0; kMiddle sum += g, g = 0;
// kLast g += sum. One read of g per element: the probe's whole cost per micro-batch.
double fused_pass(float* g, float* sum, int64_t n, Pass pass, std::vector<double>& partial) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
  for (int64_t c = 0; c < chunks; ++c) {
    double acc[kLanes] = {};
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
    for (int j = 0; i < end; ++i, ++j) acc[j] += double(g[i]) * double(g[i]);
    if (pass == Pass::kFirst) {
#pragma omp simd
      for (i = begin; i < end; ++i) sum[i] = g[i], g[i] = 0.0f;
    } else if (pass == Pass::kMiddle) {
#pragma omp simd
      for (i = begin; i < end; ++i) sum[i] += g[i], g[i] = 0.0f;
    } else {
#pragma omp simd
      for (i = begin; i < end; ++i) g[i] += sum[i];
    }
    double s = 0.0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    partial[size_t(c)] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[size_t(c)];
  return total;
}

}  // namespace

GradNoiseProbe::GradNoiseProbe(int64_t numel, int64_t micro_steps, int64_t micro_tokens,
                               scaling::NoiseScaleOptions options)
    : numel_(numel),
      micro_steps_(micro_steps),
      micro_tokens_(micro_tokens),
      estimator_(options),
      sum_(numel),
      micro_sq_(size_t(micro_steps), 0.0),
      partial_(size_t((numel + kChunk - 1) / kChunk), 0.0) {
  MEMO_CHECK(micro_steps >= 2 && micro_tokens > 0, "noise probe needs >= 2 micro-batches, got ",
             micro_steps, " of ", micro_tokens, " tokens");
}


void GradNoiseProbe::after_micro(float* grads, int64_t micro) {
  const double k = double(micro_steps_);
  const Pass pass = micro == 0 ? Pass::kFirst : micro + 1 < micro_steps_ ? Pass::kMiddle : Pass::kLast;
  // see Note [Noise-scale accounting]: the buffer holds g_i / k
  micro_sq_[size_t(micro)] = k * k * fused_pass(grads, sum_.data(), numel_, pass, partial_);
}

void GradNoiseProbe::end_step(double step_sq_norm) {
  estimator_.update(micro_sq_, step_sq_norm, double(micro_tokens_));
}

nlohmann::json GradNoiseProbe::log_fields() const {
  auto value = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"gns_b_simple", value(estimator_.b_simple())},
          {"gns_g2", value(estimator_.g2())},
          {"gns_trace", value(estimator_.trace())}};
}

nlohmann::json gns_null_fields() {
  return {{"gns_b_simple", nullptr}, {"gns_g2", nullptr}, {"gns_trace", nullptr}};
}

}  // namespace memo
