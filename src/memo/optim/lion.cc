#include "memo/optim/lion.h"

#include "memo/optim/checks.h"

namespace memo {

namespace {
inline float sign_of(float x) { return float((x > 0.0f) - (x < 0.0f)); }
}  // namespace

Lion::Lion(const ParamLayout& layout, LionOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)), m_(layout.total_numel()) {
  check_decay_mask(layout, decay_);
  check_option(options_.beta1 >= 0.0 && options_.beta1 <= 1.0, "lion", "beta1", options_.beta1,
               "[0, 1]");
  check_option(options_.beta2 >= 0.0 && options_.beta2 < 1.0, "lion", "beta2", options_.beta2,
               "[0, 1)");
  check_option(options_.weight_decay >= 0.0, "lion", "weight_decay", options_.weight_decay,
               "[0, inf)");
}

void Lion::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const float b1 = float(options_.beta1), b2 = float(options_.beta2), lr_f = float(lr);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float keep = decay_[i] ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    float* m = m_.data() + info.offset;
    const int64_t n = info.numel;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      const float c = b1 * m[j] + (1.0f - b1) * g[j];
      p[j] = p[j] * keep - lr_f * sign_of(c);
      m[j] = b2 * m[j] + (1.0f - b2) * g[j];
    }
  }
}

std::vector<StateTensor> Lion::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params())
    out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset});
  return out;
}

}  // namespace memo
