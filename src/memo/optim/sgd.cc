#include "memo/optim/sgd.h"

#include "memo/optim/checks.h"

namespace memo {

Sgd::Sgd(const ParamLayout& layout, SgdOptions options, std::vector<bool> decay)
    : layout_(layout), options_(options), decay_(std::move(decay)) {
  check_decay_mask(layout, decay_);
  check_option(options_.momentum >= 0.0 && options_.momentum < 1.0, "sgd", "momentum",
               options_.momentum, "[0, 1)");
  check_option(options_.dampening >= 0.0 && options_.dampening <= 1.0, "sgd", "dampening",
               options_.dampening, "[0, 1]");
  check_option(options_.weight_decay >= 0.0, "sgd", "weight_decay", options_.weight_decay,
               "[0, inf)");
  if (options_.nesterov && (options_.momentum == 0.0 || options_.dampening != 0.0))
    throw ConfigError(str("sgd option nesterov needs momentum > 0 and dampening = 0 (got momentum ",
                          options_.momentum, ", dampening ", options_.dampening, ")"));
  if (options_.momentum > 0.0) buf_ = AlignedBuffer<float>(layout.total_numel());
}

void Sgd::step(float* params, const float* grads, double lr) {
  ++steps_done_;
  const bool first = steps_done_ == 1;  // torch starts the buffer at d, not at (1 - damp) d
  const float mu = float(options_.momentum), keep_grad = float(1.0 - options_.dampening);
  const float lr_f = float(lr);
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const float wd = decay_[i] ? float(options_.weight_decay) : 0.0f;
    float* p = params + info.offset;
    const float* g = grads + info.offset;
    const int64_t n = info.numel;
    if (options_.momentum == 0.0) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
      for (int64_t j = 0; j < n; ++j) p[j] -= lr_f * (g[j] + wd * p[j]);
      continue;
    }
    float* b = buf_.data() + info.offset;
    const bool nesterov = options_.nesterov;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinNumel)
    for (int64_t j = 0; j < n; ++j) {
      const float d = g[j] + wd * p[j];
      b[j] = first ? d : mu * b[j] + keep_grad * d;
      p[j] -= lr_f * (nesterov ? d + mu * b[j] : b[j]);
    }
  }
}

std::vector<StateTensor> Sgd::state() {
  std::vector<StateTensor> out;
  if (options_.momentum == 0.0) return out;
  for (const ParamInfo& info : layout_.params())
    out.push_back({"momentum_buffer." + info.name, info.shape, buf_.data() + info.offset});
  return out;
}

}  // namespace memo
