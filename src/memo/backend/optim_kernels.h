// The optimiser updates of one tensor, a sub-interface of Backend (backend.h) that every backend
// provides by inheritance: Backend derives from OptimizerKernels and Backend::optimizer_kernels()
// returns it, so the optimisers (optim/) depend on these kernels alone, and a backend implements
// them beside its other kernels, with the same memory spaces and streams. Math:
// cpu/optim_kernels.h; the scalars: optim_steps.h. A state tensor the options switch off is
// passed empty. As Backend's kernels (Note [Checked entry points] in backend.h), each update is a
// non-virtual entry point that runs check_optimizer_update (checks.h) once and then calls the
// backend's do_<update>; adafactor_rms has no shared check (each backend states its own).
#pragma once

#include <cstdint>

#include "memo/backend/optim_steps.h"
#include "memo/core/tensor.h"

namespace memo {

class OptimizerKernels {
 public:
  virtual ~OptimizerKernels() = default;
  void sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s);
  void signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s);
  void adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s);
  void adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s);
  void adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s);
  void rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf, ConstTensor g,
                      const RmspropStep& s);
  void lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s);
  // Adafactor: the scratch it needs (doubles) for a tensor of `rows` rows (0: a vector) and
  // `numel` elements; RMS(x) for the relative step; the factored and the plain update.
  virtual int64_t adafactor_partial_numel(int64_t rows, int64_t numel) = 0;
  double adafactor_rms(ConstTensor x, View<double> partial);
  void adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col, ConstTensor g,
                               Tensor row_inv, Tensor col_inv, View<double> partial,
                               const AdafactorStep& s);
  void adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g, View<double> partial,
                               const AdafactorStep& s);

 protected:
  virtual void do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& s) = 0;
  virtual void do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& s) = 0;
  virtual void do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) = 0;
  virtual void do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& s) = 0;
  virtual void do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& s) = 0;
  virtual void do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                 ConstTensor g, const RmspropStep& s) = 0;
  virtual void do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& s) = 0;
  virtual double do_adafactor_rms(ConstTensor x, View<double> partial) = 0;
  virtual void do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row, Tensor col, ConstTensor g,
                                          Tensor row_inv, Tensor col_inv, View<double> partial,
                                          const AdafactorStep& s) = 0;
  virtual void do_adafactor_update_vector(Tensor p, Tensor m, Tensor v, ConstTensor g,
                                          View<double> partial, const AdafactorStep& s) = 0;
};

}  // namespace memo
