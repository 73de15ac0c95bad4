#include "memo/optim/adafactor.h"

#include <algorithm>
#include <cmath>

#include "memo/optim/checks.h"

namespace memo {

Adafactor::Adafactor(const ParamLayout& layout, AdafactorOptions options, std::vector<bool> decay,
                     Backend& backend)
    : layout_(layout), options_(options), decay_(std::move(decay)), backend_(backend) {
  check_decay_mask(layout, decay_);
  check_option(options_.beta1 >= 0.0 && options_.beta1 < 1.0, "adafactor", "beta1", options_.beta1,
               "[0, 1)");
  check_option(options_.decay_exponent > 0.0 && options_.decay_exponent <= 1.0, "adafactor",
               "decay_exponent", options_.decay_exponent, "(0, 1]");
  check_option(options_.eps1 > 0.0, "adafactor", "eps1", options_.eps1, "(0, inf)");
  check_option(options_.eps2 >= 0.0, "adafactor", "eps2", options_.eps2, "[0, inf)");
  check_option(options_.clip_threshold > 0.0, "adafactor", "clip_threshold",
               options_.clip_threshold, "(0, inf)");
  check_option(options_.weight_decay >= 0.0, "adafactor", "weight_decay", options_.weight_decay,
               "[0, inf)");
  int64_t v_numel = 0, max_rows = 1, max_cols = 1, max_chunks = 1;
  for (const ParamInfo& info : layout.params()) {
    Slot s;
    s.offset = v_numel;
    if (info.is_matrix()) {
      s.rows = info.shape[0];
      s.cols = info.shape[1];
      v_numel += s.rows + s.cols;
      max_rows = std::max(max_rows, s.rows);
      max_cols = std::max(max_cols, s.cols);
    } else {
      v_numel += info.numel;
    }
    max_chunks = std::max(max_chunks,
                          backend.optimizer_kernels().adafactor_partial_numel(s.rows, info.numel));
    slots_.push_back(s);
  }
  v_ = SpaceArray<float>(backend_, v_numel);
  MEMO_CHECK(
      v_numel + (options_.beta1 > 0.0 ? layout.total_numel() : 0) == state_numel(layout, options_),
      "adafactor: state_numel disagrees with the buffers");
  if (options_.beta1 > 0.0) m_ = SpaceArray<float>(backend_, layout.total_numel());
  row_inv_ = SpaceArray<float>(backend_, max_rows);
  col_inv_ = SpaceArray<float>(backend_, max_cols);
  partial_ = SpaceArray<double>(backend_, max_chunks);
}

void Adafactor::step(Tensor params, ConstTensor grads, double lr) {
  check_step_tensors(layout_, params, grads);
  ++steps_done_;
  const double t = double(steps_done_);
  const double beta2t =
      1.0 - std::pow(t, -options_.decay_exponent);  // 0 at t = 1: no bias correction
  const double rho = std::min(1e-2, 1.0 / std::sqrt(t));
  const View<double> partial(partial_.data(), {partial_.numel()});
  AdafactorStep s;
  s.beta2t = float(beta2t);
  s.one_minus_beta2t = float(std::pow(t, -options_.decay_exponent));
  s.eps1 = float(options_.eps1);
  s.clip_threshold = options_.clip_threshold;
  s.beta1 = float(options_.beta1);
  s.one_minus_beta1 = float(1.0 - options_.beta1);  // Note [One minus beta]
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const Tensor p = params.part(info.offset, {info.numel});
    const ConstTensor g = grads.part(info.offset, {info.numel});
    const Tensor m = options_.beta1 > 0.0 ? m_.tensor({info.numel}, info.offset) : Tensor();
    // alpha_t from p_{t-1}, before this step changes it.
    const double alpha =
        options_.relative_step
            ? std::max(options_.eps2, backend_.optimizer_kernels().adafactor_rms(p, partial)) * rho
            : lr;
    s.alpha = float(alpha);
    s.keep = decay_[i] ? float(1.0 - alpha * options_.weight_decay) : 1.0f;
    const Slot& slot = slots_[i];
    if (slot.rows > 0) {
      const Shape rc{slot.rows, slot.cols};
      backend_.optimizer_kernels().adafactor_update_matrix(
          p.reshape(rc), m.empty() ? m : m.reshape(rc), v_.tensor({slot.rows}, slot.offset),
          v_.tensor({slot.cols}, slot.offset + slot.rows), g.reshape(rc),
          row_inv_.tensor({slot.rows}), col_inv_.tensor({slot.cols}), partial, s);
    } else {
      backend_.optimizer_kernels().adafactor_update_vector(
          p, m, v_.tensor({info.numel}, slot.offset), g, partial, s);
    }
  }
}

// Algorithm 4: R = b R + (1 - b) mean_j(g^2 + eps1), C = b C + (1 - b) mean_i(g^2 + eps1) (means,
// not the paper's sums: V_hat = R C / sum(R) is the same either way), U = g / sqrt(V_hat),
// U_hat = U / max(1, RMS(U) / d), p -= alpha U_hat.
// Algorithm 5: V = b V + (1 - b)(g^2 + eps1), U = g / sqrt(V), then as for matrices.
int64_t Adafactor::state_numel(const ParamLayout& layout, const AdafactorOptions& options) {
  int64_t v = 0;
  for (const ParamInfo& info : layout.params())
    v += info.is_matrix() ? info.shape[0] + info.shape[1] : info.numel;
  return v + (options.beta1 > 0.0 ? layout.total_numel() : 0);
}

std::vector<StateTensor> Adafactor::state() {
  std::vector<StateTensor> out;
  for (size_t i = 0; i < layout_.params().size(); ++i) {
    const ParamInfo& info = layout_.params()[i];
    const Slot& s = slots_[i];
    float* v = v_.data() + s.offset;
    if (s.rows > 0) {
      out.push_back({"exp_avg_sq_row." + info.name, {s.rows}, v, v_.space()});
      out.push_back({"exp_avg_sq_col." + info.name, {s.cols}, v + s.rows, v_.space()});
    } else {
      out.push_back({"exp_avg_sq." + info.name, info.shape, v, v_.space()});
    }
    if (options_.beta1 > 0.0)
      out.push_back({"exp_avg." + info.name, info.shape, m_.data() + info.offset, m_.space()});
  }
  return out;
}

}  // namespace memo
