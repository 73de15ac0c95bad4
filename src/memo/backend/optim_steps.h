// The scalars of one optimiser update of one tensor, as the optimisers (optim/) compute them on
// the host each step and hand them to a backend's update kernel (backend/backend.h). The math of
// each update is stated at its CPU kernel (cpu/optim_kernels.h).
#pragma once

#include <cstdint>

namespace memo {

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
  float keep = 1.0f;      // 1 - lr * weight_decay (decoupled), or 1
  float momentum = 0.0f;  // beta (the buffer is empty when 0)
};

struct AdamStep {
  float beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f;
  float step_size = 0.0f;     // lr / (1 - beta1^t)
  float bias2_sqrt = 1.0f;    // sqrt(1 - beta2^t)
  float weight_decay = 0.0f;  // Adam: L2 added to the gradient
  float keep = 1.0f;          // AdamW: 1 - lr * weight_decay, applied to p first
};

struct AdagradStep {
  float lr = 0.0f;  // lr / (1 + (t - 1) lr_decay)
  float eps = 0.0f;
  float weight_decay = 0.0f;
};

struct RmspropStep {
  float lr = 0.0f, alpha = 0.0f, eps = 0.0f, momentum = 0.0f, weight_decay = 0.0f;
  bool centered = false;
};

struct LionStep {
  float lr = 0.0f, beta1 = 0.0f, beta2 = 0.0f;
  float keep = 1.0f;  // 1 - lr * weight_decay, or 1
};

struct AdafactorStep {
  float beta2t = 0.0f;  // this step's beta2_t
  float eps1 = 0.0f;    // added to g^2
  float alpha = 0.0f;   // the step size alpha_t, rounded to float as the update uses it
  double clip_threshold = 1.0;
  float beta1 = 0.0f;  // first moment (the buffer is empty when 0)
  float keep = 1.0f;   // 1 - alpha * weight_decay, or 1
};

}  // namespace memo
