// Softmax cross-entropy over the vocabulary, fp32 in and out, one row per token, parallel over rows
// (results do not depend on the thread count). The row max is exact; sum_c exp(x_c - max) adds
// float exponentials in double, so logsumexp carries only exp_f32's few-ulp error for any V.
#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/kernels.h"
#include "memo/cpu/vec_math.h"

namespace memo::cpu {
namespace {

// The row's max m (exact) and sum_c exp(x_c - m), the float exponentials added in double.
struct RowStats {
  float m;
  double sum;
};
inline RowStats row_stats(const float* xr, int64_t V) {
  float m = xr[0];
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < V; ++c) m = std::max(m, xr[c]);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < V; ++c) sum += double(exp_f32(xr[c] - m));
  return {m, sum};
}

}  // namespace

// With p = softmax(x): loss = lse(x) - x_y, d loss / dx_c = p_c - [c == y], times grad_scale.
void cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits, View<const int32_t> targets,
                   float grad_scale) {
  check_cross_entropy(losses, dlogits, logits, targets, grad_scale);
  const int64_t T = logits.rows(), V = logits.cols();
  const bool want_grad = !dlogits.empty();
  const int32_t* ys = targets.data();
  float* lp = losses.data();
#pragma omp parallel for schedule(static) if (T * V >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    if (ys[t] == kIgnoredTarget) {  // not counted: no loss, no gradient
      lp[t] = 0.0f;
      if (want_grad) std::fill_n(dlogits.data() + t * dlogits.ld(), V, 0.0f);
      continue;
    }
    const float* xr = logits.data() + t * logits.ld();
    const auto [m, sum] = row_stats(xr, V);
    const float target_logit = xr[ys[t]];  // read before dlogits (which may alias) is written
    lp[t] = float(double(m) + std::log(sum) - double(target_logit));
    if (!want_grad) continue;
    // p_c = exp(x_c - m) / sum: x_c - m is exact near the max (Sterbenz), unlike x_c - lse.
    const float scale = float(double(grad_scale) / sum);
    float* dr = dlogits.data() + t * dlogits.ld();
#pragma omp simd
    for (int64_t c = 0; c < V; ++c) dr[c] = exp_f32(xr[c] - m) * scale;
    dr[ys[t]] -= grad_scale;
  }
}

void vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                             View<const int32_t> targets) {
  check_vocab_parallel_ce_stats(stats, target_logit, logits, targets);
  const int64_t T = logits.rows(), V = logits.cols();
  const int32_t* ys = targets.data();
  float* mp = stats.data();
  float* sp = stats.data() + T;
  float* tp = target_logit.data();
#pragma omp parallel for schedule(static) if (T * V >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = logits.data() + t * logits.ld();
    const auto [m, sum] = row_stats(xr, V);
    mp[t] = m;
    sp[t] = float(sum);
    tp[t] = ys[t] < 0 ? 0.0f : xr[ys[t]];  // kOtherShard, kIgnoredTarget
  }
}

void vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                       View<const int32_t> targets, ConstTensor stats, ConstTensor target_logit,
                       float grad_scale) {
  check_vocab_parallel_ce(losses, dlogits, logits, targets, stats, target_logit);
  const int64_t T = logits.rows(), V = logits.cols(), ranks = stats.rows() / 2;
  const bool want_grad = !dlogits.empty();
  const int32_t* ys = targets.data();
  const float* st = stats.data();
  const float* tl = target_logit.data();
  float* lp = losses.data();
#pragma omp parallel for schedule(static) if (T * V >= kParallelMinNumel)
  for (int64_t t = 0; t < T; ++t) {
    if (ys[t] == kIgnoredTarget) {  // not counted: no loss, no gradient
      lp[t] = 0.0f;
      if (want_grad) std::fill_n(dlogits.data() + t * dlogits.ld(), V, 0.0f);
      continue;
    }
    float m = st[t];
    for (int64_t r = 1; r < ranks; ++r) m = std::max(m, st[2 * r * T + t]);
    double sum = 0.0;
    for (int64_t r = 0; r < ranks; ++r)
      sum += double(st[(2 * r + 1) * T + t]) * std::exp(double(st[2 * r * T + t]) - double(m));
    lp[t] = float(double(m) + std::log(sum) - double(tl[t]));
    if (!want_grad) continue;
    const float* xr = logits.data() + t * logits.ld();
    const float scale = float(double(grad_scale) / sum);
    float* dr = dlogits.data() + t * dlogits.ld();
#pragma omp simd
    for (int64_t c = 0; c < V; ++c) dr[c] = exp_f32(xr[c] - m) * scale;
    if (ys[t] != kOtherShard) dr[ys[t]] -= grad_scale;
  }
}

}  // namespace memo::cpu
