// The scalars of one optimiser update of one tensor, as the optimisers (optim/) compute them on
// the host each step and hand them to a backend's update kernel (backend/backend.h). The math of
// each update is stated at its CPU kernel (cpu/optim_kernels.h).
#pragma once

#include <cstdint>

namespace memo {

// Note [One minus beta]
// An EMA's weights beta and 1 - beta reach the kernels as two floats, each rounded once from the
// double the user gave: the kernels never compute 1.0f - float(beta). That difference loses
// 1 - beta's digits as beta nears 1 (float(0.9999999) leaves 1.19e-7, not 1e-7; every beta above
// 1 - 3e-8 rounds to 1.0f and leaves 0: a moment that never moves, or an Adam second moment that
// stays 0 and an update divided by eps alone); PyTorch, too, forms 1 - beta in double. The
// optimisers (optim/) fill both.

struct SgdStep {
  float lr = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient
  float momentum = 0.0f;      // mu (the buffer is empty when 0)
  float keep_grad = 1.0f;     // 1 - dampening
  bool nesterov = false;
  bool first = false;  // the first step: the buffer starts at d
};

struct SignSgdStep {
  float lr = 0.0f;
  float keep = 1.0f;                // 1 - lr * weight_decay (decoupled), or 1
  float momentum = 0.0f;            // beta (the buffer is empty when 0)
  float one_minus_momentum = 1.0f;  // 1 - beta (Note [One minus beta])
};

struct AdamStep {
  float beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f;
  float step_size = 0.0f;     // lr / (1 - beta1^t)
  float bias2_sqrt = 1.0f;    // sqrt(1 - beta2^t)
  float weight_decay = 0.0f;  // Adam: L2 added to the gradient
  float keep = 1.0f;          // AdamW: 1 - lr * weight_decay, applied to p first
  float one_minus_beta1 = 1.0f, one_minus_beta2 = 1.0f;  // Note [One minus beta]
};

struct AdagradStep {
  float lr = 0.0f;  // lr / (1 + (t - 1) lr_decay)
  float eps = 0.0f;
  float weight_decay = 0.0f;
};

struct RmspropStep {
  float lr = 0.0f, alpha = 0.0f, eps = 0.0f, momentum = 0.0f, weight_decay = 0.0f;
  bool centered = false;
  float one_minus_alpha = 1.0f;  // Note [One minus beta]
};

struct LionStep {
  float lr = 0.0f, beta1 = 0.0f, beta2 = 0.0f;
  float keep = 1.0f;                                     // 1 - lr * weight_decay, or 1
  float one_minus_beta1 = 1.0f, one_minus_beta2 = 1.0f;  // Note [One minus beta]
};

struct AdafactorStep {
  float beta2t = 0.0f;  // this step's beta2_t
  float eps1 = 0.0f;    // added to g^2
  float alpha = 0.0f;   // the step size alpha_t, rounded to float as the update uses it
  double clip_threshold = 1.0;
  float beta1 = 0.0f;  // first moment (the buffer is empty when 0)
  float keep = 1.0f;   // 1 - alpha * weight_decay, or 1
  float one_minus_beta2t = 1.0f, one_minus_beta1 = 1.0f;  // Note [One minus beta]
};

}  // namespace memo
