#include "memo/optim/signsgd.h"

#include "memo/optim/checks.h"

namespace memo {

namespace {
inline float sign_of(float x) { return float((x > 0.0f) - (x < 0.0f)); }
}  // namespace

SignSgd::SignSgd(const ParamLayout& layout, SignSgdOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)) {
  check_decay_mask(layout, decay_);
  check_option(options_.momentum >= 0.0 && options_.momentum < 1.0, "signsgd", "momentum",
               options_.momentum, "[0, 1)");
  check_option(options_.weight_decay >= 0.0, "signsgd", "weight_decay", options_.weight_decay,
               "[0, inf)");
  if (options_.momentum > 0.0) m_ = AlignedBuffer<float>(layout.total_numel());
}

void SignSgd::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const float beta = float(options_.momentum), lr_f = float(lr);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float keep = decay_[i] ? float(1.0 - lr * options_.weight_decay) : 1.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    const int64_t n = info.numel;
    if (options_.momentum == 0.0) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
      for (int64_t j = 0; j < n; ++j) p[j] = p[j] * keep - lr_f * sign_of(g[j]);
      continue;
    }
    float* m = m_.data() + info.offset;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      m[j] = beta * m[j] + (1.0f - beta) * g[j];
      p[j] = p[j] * keep - lr_f * sign_of(m[j]);
    }
  }
}

std::vector<StateTensor> SignSgd::state() {
  std::vector<StateTensor> out;
  if (options_.momentum == 0.0) return out;
  for (const ParamInfo& info : layout_.params())
    out.push_back({"momentum_buffer." + info.name, info.shape, m_.data() + info.offset});
  return out;
}

}  // namespace memo
