#include "memo/optim/rmsprop.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

Rmsprop::Rmsprop(const ParamLayout& layout, RmspropOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)),
      square_avg_(layout.total_numel()) {
  check_decay_mask(layout, decay_);
  check_option(options_.alpha >= 0.0 && options_.alpha < 1.0, "rmsprop", "alpha", options_.alpha,
               "[0, 1)");
  check_option(options_.eps > 0.0, "rmsprop", "eps", options_.eps, "(0, inf)");
  check_option(options_.momentum >= 0.0 && options_.momentum < 1.0, "rmsprop", "momentum",
               options_.momentum, "[0, 1)");
  check_option(options_.weight_decay >= 0.0, "rmsprop", "weight_decay", options_.weight_decay,
               "[0, inf)");
  if (options_.centered) grad_avg_ = AlignedBuffer<float>(layout.total_numel());
  if (options_.momentum > 0.0) buf_ = AlignedBuffer<float>(layout.total_numel());
}

void Rmsprop::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const float alpha = float(options_.alpha), eps = float(options_.eps);
  const float mu = float(options_.momentum), lr_f = float(lr);
  const bool centered = options_.centered, use_momentum = options_.momentum > 0.0;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float wd = decay_[i] ? float(options_.weight_decay) : 0.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    float* v = square_avg_.data() + info.offset;
    float* a = centered ? grad_avg_.data() + info.offset : nullptr;
    float* b = use_momentum ? buf_.data() + info.offset : nullptr;
    const int64_t n = info.numel;
#pragma omp parallel for schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      const float d = g[j] + wd * p[j];
      v[j] = alpha * v[j] + (1.0f - alpha) * d * d;
      float var = v[j];
      if (centered) {
        a[j] = alpha * a[j] + (1.0f - alpha) * d;
        var = v[j] - a[j] * a[j];
      }
      const float den = std::sqrt(var) + eps;
      if (use_momentum) {
        b[j] = mu * b[j] + d / den;
        p[j] -= lr_f * b[j];
      } else {
        p[j] -= lr_f * (d / den);
      }
    }
  }
}

std::vector<StateTensor> Rmsprop::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params()) {
    out.push_back({"square_avg." + info.name, info.shape, square_avg_.data() + info.offset});
    if (options_.centered)
      out.push_back({"grad_avg." + info.name, info.shape, grad_avg_.data() + info.offset});
    if (options_.momentum > 0.0)
      out.push_back({"momentum_buffer." + info.name, info.shape, buf_.data() + info.offset});
  }
  return out;
}

}  // namespace memo
