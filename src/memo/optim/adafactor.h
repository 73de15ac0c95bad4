// Adafactor (Shazeer & Stern 2018, arXiv 1804.04235), the paper's recommended variant: Algorithm 4
// for matrices (factored second moment from row and column EMAs of g^2 + eps1, Section 3) and
// Algorithm 5 for vectors (unfactored), increasing decay beta2_t = 1 - t^-c (Section 7.1), update
// clipping U_hat = U / max(1, RMS(U)/d) (Section 6), relative step alpha_t = max(eps2,
// RMS(p_{t-1})) rho_t with rho_t = min(1e-2, 1/sqrt(t)) (Section 8), and the paper's proposed
// eps1 = 1e-30, eps2 = 1e-3, d = 1, c = 0.8. We cite algorithm lines and sections, not equation
// numbers, which we could not check against the paper's text. Optional first moment (beta1 > 0)
// as Tensor2Tensor and fairseq: m = b1 m + (1 - b1) alpha U_hat, p -= m. Decoupled weight decay
// p *= 1 - alpha_t wd (fairseq / Hugging Face) on the tensors marked in `decay`.
#pragma once

#include <vector>

#include "memo/backend/backend.h"
#include "memo/backend/space_array.h"
#include "memo/optim/optimizer.h"

namespace memo {

struct AdafactorOptions {
  double beta1 = 0.0;           // 0: no first moment, no exp_avg state (the paper's choice)
  double decay_exponent = 0.8;  // c in beta2_t = 1 - t^-c
  double eps1 = 1e-30;          // added to g^2 before averaging
  double eps2 = 1e-3;           // lower bound on RMS(p) in the relative step
  double clip_threshold = 1.0;  // d: the update's RMS is clipped to d
  bool relative_step = true;  // alpha_t = max(eps2, RMS(p)) min(1e-2, 1/sqrt(t)); off: alpha_t = lr
  double weight_decay = 0.0;  // decoupled, scaled by alpha_t
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AdafactorOptions, beta1, decay_exponent, eps1, eps2,
                                                clip_threshold, relative_step, weight_decay)

class Adafactor final : public Optimizer {
 public:
  Adafactor(const ParamLayout& layout, AdafactorOptions options, std::vector<bool> decay,
            Backend& backend);
  // Floats of the state buffers for layout: the factored second moment (rows + columns of each
  // matrix, every entry of a vector) and, with beta1 > 0, the first moment.
  static int64_t state_numel(const ParamLayout& layout, const AdafactorOptions& options);
  std::string name() const override { return "adafactor"; }
  // With relative_step on (the default) lr is ignored: the step size is alpha_t above.
  void step(Tensor params, ConstTensor grads, double lr) override;
  std::vector<StateTensor> state() override;
  int64_t state_bytes() const override { return v_.bytes() + m_.bytes(); }
  nlohmann::json hyperparameters() const override { return options_; }

 private:
  struct Slot {        // where tensor i's second-moment statistics live in v_
    int64_t rows = 0;  // R of an [R, C] matrix; 0 for an unfactored tensor
    int64_t cols = 0;  // C
    int64_t offset =
        0;  // factored: row means at v_[offset, +R), column means at v_[offset + R, +C);
  };        // unfactored: the full EMA at v_[offset, +numel)

  const ParamLayout& layout_;
  AdafactorOptions options_;
  std::vector<bool> decay_;
  std::vector<Slot> slots_;
  SpaceArray<float> v_;         // row/column means (matrices), full EMA (vectors); fp32
  SpaceArray<float> m_;         // [total_numel] first moment; empty when beta1 = 0
  SpaceArray<float> row_inv_;   // scratch [max R]: 1 / sqrt(row mean / mean of row means)
  SpaceArray<float> col_inv_;   // scratch [max C]: 1 / sqrt(column mean)
  SpaceArray<double> partial_;  // scratch: chunk sums of the deterministic reductions
  Backend& backend_;            // runs the updates (backend/backend.h)
};

}  // namespace memo
