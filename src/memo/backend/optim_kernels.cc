// The checked entry points of OptimizerKernels (optim_kernels.h).
#include "memo/backend/optim_kernels.h"

#include "memo/backend/checks.h"

namespace memo {

void OptimizerKernels::sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) {
  check_optimizer_update("sgd_update", p, g, {buf});
  do_sgd_update(p, buf, g, s);
}
void OptimizerKernels::signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s) {
  check_optimizer_update("signsgd_update", p, g, {m});
  do_signsgd_update(p, m, g, s);
}
void OptimizerKernels::adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) {
  check_optimizer_update("adam_update", p, g, {m, v});
  do_adam_update(p, m, v, g, s);
}
void OptimizerKernels::adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                    const AdamStep& s) {
  check_optimizer_update("adamw_update", p, g, {m, v});
  do_adamw_update(p, m, v, g, s);
}
void OptimizerKernels::adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s) {
  check_optimizer_update("adagrad_update", p, g, {sum});
  do_adagrad_update(p, sum, g, s);
}
void OptimizerKernels::rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                      ConstTensor g, const RmspropStep& s) {
  check_optimizer_update("rmsprop_update", p, g, {square_avg, grad_avg, buf});
  do_rmsprop_update(p, square_avg, grad_avg, buf, g, s);
}
void OptimizerKernels::lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) {
  check_optimizer_update("lion_update", p, g, {m});
  do_lion_update(p, m, g, s);
}
double OptimizerKernels::adafactor_rms(ConstTensor x, View<double> partial) {
  return do_adafactor_rms(x, partial);
}
void OptimizerKernels::adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col,
                                               ConstTensor g, Tensor row_inv, Tensor col_inv,
                                               View<double> partial, const AdafactorStep& s) {
  check_optimizer_update("adafactor_update_matrix", p, g, {m});
  do_adafactor_update_matrix(p, m, row, col, g, row_inv, col_inv, partial, s);
}
void OptimizerKernels::adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                               View<double> partial, const AdafactorStep& s) {
  check_optimizer_update("adafactor_update_vector", p, g, {m, v});
  do_adafactor_update_vector(p, m, v, g, partial, s);
}

}  // namespace memo
