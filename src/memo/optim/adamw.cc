#include "memo/optim/adamw.h"

#include <cmath>

#include "memo/optim/adam.h"
#include "memo/optim/checks.h"

namespace memo {

AdamW::AdamW(const ParamLayout& layout, AdamWOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)), m_(layout.total_numel()),
      v_(layout.total_numel()) {
  check_decay_mask(layout, decay_);
  check_adam_options("adamw", options_.beta1, options_.beta2, options_.eps, options_.weight_decay);
}

void AdamW::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const double t = double(steps_done_);
  const float b1 = float(options_.beta1), b2 = float(options_.beta2), eps = float(options_.eps);
  const float bias1 = float(1.0 - std::pow(options_.beta1, t));
  const float bias2_sqrt = float(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  const float step_size = float(lr) / bias1;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float keep = decay_[i] ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    float* m = m_.data() + info.offset;
    float* v = v_.data() + info.offset;
    const int64_t n = info.numel;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      p[j] *= keep;
      m[j] = b1 * m[j] + (1.0f - b1) * g[j];
      v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
      const float denom = std::sqrt(v[j]) / bias2_sqrt + eps;
      p[j] -= step_size * (m[j] / denom);
    }
  }
}

std::vector<StateTensor> AdamW::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params()) {
    out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset});
    out.push_back({"exp_avg_sq." + info.name, info.shape, v_.data() + info.offset});
  }
  return out;
}

}  // namespace memo
