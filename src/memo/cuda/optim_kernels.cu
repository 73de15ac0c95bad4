// The CUDA backend's optimiser updates (backend_impl.cuh; math: cpu/optim_kernels.h, the bodies
// in cuda/bodies.h): a thread an element; Adafactor's factored second moment a thread a row or
// a column, its sums of squares added on the host in order.
#include <algorithm>
#include <cmath>

#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {

void CudaBackend::do_sgd_update(Tensor p, Tensor buf, ConstTensor g, const SgdStep& st) {
  const Timed timed(this, "sgd_update");
  float *pp = dev(p), *bp = dev(buf);
  const float* gp = dev(g);
  launch(p.numel(), [=] __device__(int64_t j) { cuda::sgd_elem(pp, bp, gp, st, j); });
}
void CudaBackend::do_signsgd_update(Tensor p, Tensor m, ConstTensor g, const SignSgdStep& st) {
  const Timed timed(this, "signsgd_update");
  float *pp = dev(p), *mp = dev(m);
  const float* gp = dev(g);
  launch(p.numel(), [=] __device__(int64_t j) { cuda::signsgd_elem(pp, mp, gp, st, j); });
}
void CudaBackend::do_adam_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st) {
  const Timed timed(this, "adam_update");
  adam(p, m, v, g, st, false);
}
void CudaBackend::do_adamw_update(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st) {
  const Timed timed(this, "adamw_update");
  adam(p, m, v, g, st, true);
}
void CudaBackend::do_adagrad_update(Tensor p, Tensor sum, ConstTensor g, const AdagradStep& st) {
  const Timed timed(this, "adagrad_update");
  float *pp = dev(p), *sp = dev(sum);
  const float* gp = dev(g);
  launch(p.numel(), [=] __device__(int64_t j) { cuda::adagrad_elem(pp, sp, gp, st, j); });
}
void CudaBackend::do_rmsprop_update(Tensor p, Tensor square_avg, Tensor grad_avg, Tensor buf,
                                    ConstTensor g, const RmspropStep& st) {
  const Timed timed(this, "rmsprop_update");
  float *pp = dev(p), *sq = dev(square_avg), *ga = dev(grad_avg), *bp = dev(buf);
  const float* gp = dev(g);
  launch(p.numel(), [=] __device__(int64_t j) { cuda::rmsprop_elem(pp, sq, ga, bp, gp, st, j); });
}
void CudaBackend::do_lion_update(Tensor p, Tensor m, ConstTensor g, const LionStep& st) {
  const Timed timed(this, "lion_update");
  float *pp = dev(p), *mp = dev(m);
  const float* gp = dev(g);
  launch(p.numel(), [=] __device__(int64_t j) { cuda::lion_elem(pp, mp, gp, st, j); });
}

double CudaBackend::do_adafactor_rms(ConstTensor x, View<double> partial) {
  const Timed timed(this, "adafactor_rms");
  MEMO_CHECK(x.contiguous(), "adafactor_rms: x ", x.shape(), " not contiguous");
  return std::sqrt(ordered_sum(cmat(x), true) / double(std::max<int64_t>(1, x.numel())));
}
void CudaBackend::do_adafactor_update_matrix(Tensor p, Tensor m, Tensor row_t, Tensor col_t,
                                             ConstTensor g, Tensor row_inv, Tensor col_inv,
                                             View<double> partial, const AdafactorStep& st) {
  const Timed timed(this, "adafactor_update_matrix");
  const int64_t R = p.rows(), C = p.cols();
  MEMO_CHECK(p.ndim() == 2 && row_t.numel() == R && col_t.numel() == C && row_inv.numel() >= R &&
                 col_inv.numel() >= C && partial.numel() >= R + 1,
             "adafactor_update_matrix: p ", p.shape(), " row ", row_t.shape(), " col ",
             col_t.shape(), " scratch ", row_inv.shape(), " ", col_inv.shape(), " ",
             partial.shape());
  float *row = dev(row_t), *col = dev(col_t), *ri = dev(row_inv), *ci = dev(col_inv);
  const float* gp = dev(g);
  double* pd = partial.data();
  const float b = st.beta2t, rb = st.one_minus_beta2t, eps1 = st.eps1;
  launch(R, [=] __device__(int64_t r) { cuda::adafactor_row(row, gp, C, b, rb, eps1, r); });
  launch(C, [=] __device__(int64_t c) { cuda::adafactor_col(col, gp, R, C, b, rb, eps1, c); });
  launch(1, [=] __device__(int64_t) { pd[R] = cuda::adafactor_row_mean(row, R); });
  launch(R, [=] __device__(int64_t r) { ri[r] = cuda::adafactor_inv_row(row[r], pd[R]); });
  launch(C, [=] __device__(int64_t c) { ci[c] = cuda::adafactor_inv_col(col[c]); });
  launch(R, [=] __device__(int64_t r) { pd[r] = cuda::adafactor_u_row_sq(gp, ri, ci, C, r); });
  const double rms_u = std::sqrt(host_ordered_sum(pd, R) / double(R * C));
  const float scale = float(st.alpha / std::max(1.0, rms_u / st.clip_threshold));
  float *pp = dev(p), *mp = dev(m);
  const float b1 = st.beta1, r1 = st.one_minus_beta1, keep = st.keep;
  launch(R * C, [=] __device__(int64_t j) {
    const int64_t r = j / C, c = j % C;
    cuda::adafactor_apply(pp, mp, scale * (gp[j] * ri[r] * ci[c]), b1, r1, keep, j);
  });
}
void CudaBackend::do_adafactor_update_vector(Tensor p, Tensor m, Tensor v_t, ConstTensor g,
                                             View<double> partial, const AdafactorStep& st) {
  const Timed timed(this, "adafactor_update_vector");
  const int64_t n = p.numel();
  const int64_t chunks = (n + cuda::kAdafactorChunk - 1) / cuda::kAdafactorChunk;
  MEMO_CHECK(partial.numel() >= chunks, "adafactor_update_vector: ", partial.numel(),
             " partial sums for ", n, " elements");
  float* v = dev(v_t);
  const float* gp = dev(g);
  double* pd = partial.data();
  const float b = st.beta2t, rb = st.one_minus_beta2t, eps1 = st.eps1;
  launch(n, [=] __device__(int64_t j) { cuda::adafactor_v(v, gp, b, rb, eps1, j); });
  launch(chunks, [=] __device__(int64_t k) { pd[k] = cuda::adafactor_v_chunk_sq(gp, v, n, k); });
  const double rms_u = std::sqrt(host_ordered_sum(pd, chunks) / double(n));
  const float scale = float(st.alpha / std::max(1.0, rms_u / st.clip_threshold));
  float *pp = dev(p), *mp = dev(m);
  const float b1 = st.beta1, r1 = st.one_minus_beta1, keep = st.keep;
  launch(n, [=] __device__(int64_t j) {
    cuda::adafactor_apply(pp, mp, scale * (gp[j] / ::sqrtf(v[j])), b1, r1, keep, j);
  });
}

void CudaBackend::adam(Tensor p, Tensor m, Tensor v, ConstTensor g, const AdamStep& st,
                       bool decoupled) {
  float *pp = dev(p), *mp = dev(m), *vp = dev(v);
  const float* gp = dev(g);
  launch(p.numel(),
         [=] __device__(int64_t j) { cuda::adam_elem(pp, mp, vp, gp, st, decoupled, j); });
}

}  // namespace memo::cuda_impl
