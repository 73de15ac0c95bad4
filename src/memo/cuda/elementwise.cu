// The CUDA backend's elementwise and per-token kernels (backend_impl.cuh; math: cpu/kernels.h):
// RoPE, SwiGLU, GELU, the bias and the embedding, a thread an element (the weight gradients a
// thread a column: no atomics).
#include <vector>

#include "memo/cpu/kernels.h"
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {

// The table is the CPU's (computed in double on the host), copied up.
void CudaBackend::do_rope_table(Tensor cos, Tensor sin, std::span<const double> inv_freq,
                                double attention_factor, int64_t first_position) {
  const Timed timed(this, "rope_table");
  MEMO_CHECK(cos.contiguous() && sin.contiguous(), "rope_table: non-contiguous tables");
  std::vector<float> c(size_t(cos.numel())), s(size_t(sin.numel()));
  cpu::rope_table(View<float>(c.data(), cos.shape()), View<float>(s.data(), sin.shape()), inv_freq,
                  attention_factor, first_position);
  copy_from_host(dev(cos), c.data(), cos.bytes());
  copy_from_host(dev(sin), s.data(), sin.bytes());
}
void CudaBackend::do_rope_forward(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                  int64_t first_row) {
  const Timed timed(this, "rope_forward");
  rotate(x, cos, sin, head_dim, first_row, 1.0f);
}
void CudaBackend::do_rope_backward(Tensor dx, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                                   int64_t first_row) {
  const Timed timed(this, "rope_backward");
  rotate(dx, cos, sin, head_dim, first_row, -1.0f);
}
void CudaBackend::do_swiglu_forward(Tensor a, ConstTensor g, ConstTensor u) {
  const Timed timed(this, "swiglu_forward");
  const cuda::XMat A = xmat(a), G = xmat(g), U = xmat(u);
  launch_rc(G.rows, G.cols, [=] __device__(int64_t t, int64_t f) {
    A.at(t, f) = cuda::swiglu(G.at(t, f), U.at(t, f));
  });
}
void CudaBackend::do_swiglu_backward(Tensor dg, Tensor du, ConstTensor da, ConstTensor g,
                                     ConstTensor u) {
  const Timed timed(this, "swiglu_backward");
  const cuda::XMat DG = xmat(dg), DU = xmat(du), DA = xmat(da), G = xmat(g), U = xmat(u);
  launch_rc(G.rows, G.cols, [=] __device__(int64_t t, int64_t f) {
    float dgv, duv;  // da, g, u read before either output is written (they may alias)
    cuda::swiglu_backward_elem(&dgv, &duv, DA.at(t, f), G.at(t, f), U.at(t, f));
    DG.at(t, f) = dgv;
    DU.at(t, f) = duv;
  });
}
void CudaBackend::do_gelu_forward(Tensor y, ConstTensor x) {
  const Timed timed(this, "gelu_forward");
  const cuda::XMat Y = xmat(y), X = xmat(x);
  launch_rc(X.rows, X.cols,
            [=] __device__(int64_t t, int64_t c) { Y.at(t, c) = cuda::gelu(X.at(t, c)); });
}
void CudaBackend::do_gelu_backward(Tensor dx, ConstTensor dy, ConstTensor x) {
  const Timed timed(this, "gelu_backward");
  const cuda::XMat DX = xmat(dx), DY = xmat(dy), X = xmat(x);
  launch_rc(X.rows, X.cols, [=] __device__(int64_t t, int64_t c) {
    DX.at(t, c) = cuda::gelu_backward(DY.at(t, c), X.at(t, c));
  });
}
void CudaBackend::do_bias_add(Tensor y, ConstTensor b) {
  const Timed timed(this, "bias_add");
  const cuda::XMat Y = xmat(y);
  const cuda::XVec bp = xvec(b);
  launch_rc(Y.rows, Y.cols, [=] __device__(int64_t t, int64_t c) { Y.at(t, c) += bp[c]; });
}
void CudaBackend::do_bias_backward(Tensor db, ConstTensor dy) {
  const Timed timed(this, "bias_backward");
  const cuda::XMat DY = xmat(dy);
  float* dbp = dev(db);
  launch_column_sums(dbp, DY.cols, [=] __device__(int64_t c, int lane, int lanes) {
    return cuda::bias_backward_part(DY, c, lane, lanes);
  });
}
void CudaBackend::do_embedding_forward(Tensor x, View<const int32_t> tokens, ConstTensor wte) {
  const Timed timed(this, "embedding_forward");
  const int32_t* ids = device_ids(tokens);
  const cuda::XMat X = xmat(x), W = xmat(wte);
  launch_rc(X.rows, X.cols, [=] __device__(int64_t t, int64_t c) {
    X.at(t, c) = cuda::embedding_forward_at(W, ids, t, c);
  });
}
void CudaBackend::do_embedding_backward(Tensor dwte, ConstTensor dx, View<const int32_t> tokens) {
  const Timed timed(this, "embedding_backward");
  const int32_t* ids = device_ids(tokens);
  const Mat DW = mat(dwte);
  const cuda::XMat DX = xmat(dx);
  launch(DX.cols, [=] __device__(int64_t c) { cuda::embedding_backward_col(DW, DX, ids, c); });
}

void CudaBackend::rotate(Tensor x, ConstTensor cos, ConstTensor sin, int64_t head_dim,
                         int64_t first_row, float sign) {
  const cuda::XMat X = xmat(x);
  const CMat CO = cmat(cos), SI = cmat(sin);
  const int64_t half = head_dim / 2, per_row = X.cols / head_dim * half;
  launch(X.rows * per_row, [=] __device__(int64_t i) {
    const int64_t t = i / per_row, r = i % per_row;
    cuda::rope_rotate_pair(X, CO, SI, head_dim, first_row, sign, t, r / half, r % half);
  });
}

}  // namespace memo::cuda_impl
