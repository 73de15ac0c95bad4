#include "memo/optim/adagrad.h"

#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

Adagrad::Adagrad(const ParamLayout& layout, AdagradOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)), sum_(layout.total_numel()) {
  check_decay_mask(layout, decay_);
  check_option(options_.lr_decay >= 0.0, "adagrad", "lr_decay", options_.lr_decay, "[0, inf)");
  check_option(options_.initial_accumulator_value >= 0.0, "adagrad", "initial_accumulator_value",
               options_.initial_accumulator_value, "[0, inf)");
  check_option(options_.eps > 0.0, "adagrad", "eps", options_.eps, "(0, inf)");
  check_option(options_.weight_decay >= 0.0, "adagrad", "weight_decay", options_.weight_decay,
               "[0, inf)");
  const float init = float(options_.initial_accumulator_value);
  for (int64_t j = 0; j < sum_.numel(); ++j) sum_[j] = init;
}

void Adagrad::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const float clr = float(lr / (1.0 + double(steps_done_ - 1) * options_.lr_decay));
  const float eps = float(options_.eps);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float wd = decay_[i] ? float(options_.weight_decay) : 0.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    float* s = sum_.data() + info.offset;
    const int64_t n = info.numel;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      const float d = g[j] + wd * p[j];
      s[j] += d * d;
      p[j] -= clr * (d / (std::sqrt(s[j]) + eps));
    }
  }
}

std::vector<StateTensor> Adagrad::state() {
  std::vector<StateTensor> out;
  for (const ParamInfo& info : layout_.params())
    out.push_back({"sum." + info.name, info.shape, sum_.data() + info.offset});
  return out;
}

}  // namespace memo
