#include "memo/optim/adam.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

void check_adam_options(const std::string& optimizer, double beta1, double beta2, double eps,
                        double weight_decay) {
  check_option(beta1 >= 0.0 && beta1 < 1.0, optimizer, "beta1", beta1, "[0, 1)");
  check_option(beta2 >= 0.0 && beta2 < 1.0, optimizer, "beta2", beta2, "[0, 1)");
  check_option(eps > 0.0, optimizer, "eps", eps, "(0, inf)");
  check_option(weight_decay >= 0.0, optimizer, "weight_decay", weight_decay, "[0, inf)");
}

Adam::Adam(const ParamLayout& layout, AdamOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)), m_(layout.total_numel()),
      v_(layout.total_numel()) {
  check_decay_mask(layout, decay_);
  check_adam_options("adam", options_.beta1, options_.beta2, options_.eps, options_.weight_decay);
}

void Adam::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const double t = double(steps_done_);
  const float b1 = float(options_.beta1), b2 = float(options_.beta2), eps = float(options_.eps);
  const float bias2_sqrt = float(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  const float step_size = float(lr / (1.0 - std::pow(options_.beta1, t)));
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float wd = decay_[i] ? float(options_.weight_decay) : 0.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    float* m = m_.data() + info.offset;
    float* v = v_.data() + info.offset;
    const int64_t n = info.numel;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      const float d = g[j] + wd * p[j];
      m[j] = b1 * m[j] + (1.0f - b1) * d;
      v[j] = b2 * v[j] + (1.0f - b2) * d * d;
      p[j] -= step_size * (m[j] / (std::sqrt(v[j]) / bias2_sqrt + eps));
    }
  }
}

std::vector<StateTensor> Adam::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params()) {
    out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset});
    out.push_back({"exp_avg_sq." + info.name, info.shape, v_.data() + info.offset});
  }
  return out;
}

}  // namespace memo
