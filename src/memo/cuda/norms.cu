// The CUDA backend's norms (backend_impl.cuh; math: cpu/kernels.h): RMSNorm and LayerNorm, a
// block of lanes a row (Note [Row lanes] in cuda/bodies.h), the weight gradients a block of lanes
// for 32 columns (Note [Column lanes]).
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
namespace {

__global__ void rmsnorm_forward_kernel(cuda::XMat y, float* inv_rms, cuda::XMat x, cuda::XVec w,
                                       float eps) {
  __shared__ double a[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  a[lane] = cuda::rmsnorm_sumsq_part(x, t, lane, cuda::kRowLanes);
  row_sum_tree(a, lane);
  const float r = cuda::rmsnorm_inv_rms(a[0], x.cols, eps);
  if (lane == 0) inv_rms[t] = r;
  cuda::rmsnorm_write_part(y, x, w, r, t, lane, cuda::kRowLanes);
}
__global__ void rmsnorm_dx_kernel(cuda::XMat dx, cuda::XMat dy, cuda::XMat x, cuda::XVec w,
                                  const float* r) {
  __shared__ double a[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  a[lane] = cuda::rmsnorm_dot_part(dy, x, w, t, lane, cuda::kRowLanes);
  row_sum_tree(a, lane);
  cuda::rmsnorm_dx_part(dx, dy, x, w, r, a[0], t, lane, cuda::kRowLanes);
}
// Two sums in one tree (each of a and b its own).
__device__ void row_sum_tree2(double* a, double* b, int lane) {
  __syncthreads();
  for (int half = cuda::kRowLanes / 2; half > 0; half /= 2) {
    if (lane < half) {
      cuda::row_tree_sum(a, lane, half);
      cuda::row_tree_sum(b, lane, half);
    }
    __syncthreads();
  }
}
__global__ void layernorm_forward_kernel(cuda::XMat y, float* mean, float* rstd, cuda::XMat x,
                                         cuda::XVec w, cuda::XVec b, float eps) {
  __shared__ double sum[cuda::kRowLanes], sum_sq[cuda::kRowLanes];  // two: no read-write race
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  const double C = double(x.cols);
  sum[lane] = cuda::layernorm_sum_part(x, t, lane, cuda::kRowLanes);
  row_sum_tree(sum, lane);
  const double m = sum[0] / C;
  sum_sq[lane] = cuda::layernorm_sumsq_part(x, m, t, lane, cuda::kRowLanes);
  row_sum_tree(sum_sq, lane);
  const double r = 1.0 / ::sqrt(sum_sq[0] / C + double(eps));
  if (lane == 0) {
    mean[t] = float(m);
    rstd[t] = float(r);
  }
  cuda::layernorm_write_part(y, x, w, b, m, r, t, lane, cuda::kRowLanes);
}
__global__ void layernorm_dx_kernel(cuda::XMat dx, cuda::XMat dy, cuda::XMat x, cuda::XVec w,
                                    const float* mean, const float* rstd) {
  __shared__ double sg[cuda::kRowLanes], sgx[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  const double m = mean[t], r = rstd[t];
  double g, gx;  // in registers, then shared
  cuda::layernorm_grad_sums_part(dy, x, w, m, r, t, lane, cuda::kRowLanes, g, gx);
  sg[lane] = g;
  sgx[lane] = gx;
  row_sum_tree2(sg, sgx, lane);
  cuda::layernorm_dx_part(dx, dy, x, w, m, r, sg[0], sgx[0], t, lane, cuda::kRowLanes);
}

}  // namespace

void CudaBackend::do_rmsnorm_forward(Tensor y, Tensor inv_rms, ConstTensor x, ConstTensor w,
                                     float eps) {
  const Timed timed(this, "rmsnorm_forward");
  const cuda::XMat Y = xmat(y), X = xmat(x);
  float* r = dev(inv_rms);
  const cuda::XVec wp = xvec(w);
  if (X.rows == 0) return;
  rmsnorm_forward_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(Y, r, X, wp, eps);
  check_cuda(cudaGetLastError(), "rmsnorm_forward launch");
}
void CudaBackend::do_rmsnorm_backward(Tensor dx, Tensor dw, ConstTensor dy, ConstTensor x,
                                      ConstTensor w, ConstTensor inv_rms) {
  const Timed timed(this, "rmsnorm_backward");
  const cuda::XMat DX = xmat(dx), DY = xmat(dy), X = xmat(x);
  const cuda::XVec wp = xvec(w);
  const float* r = dev(inv_rms);
  float* dwp = dev(dw);
  if (X.rows == 0) return;
  rmsnorm_dx_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(DX, DY, X, wp, r);
  check_cuda(cudaGetLastError(), "rmsnorm_backward launch");
  launch_column_sums(dwp, X.cols, [=] __device__(int64_t c, int lane, int lanes) {
    return cuda::rmsnorm_dw_part(DY, X, r, c, lane, lanes);
  });
}
void CudaBackend::do_layernorm_forward(Tensor y, Tensor mean, Tensor rstd, ConstTensor x,
                                       ConstTensor w, ConstTensor b, float eps) {
  const Timed timed(this, "layernorm_forward");
  const cuda::XMat Y = xmat(y), X = xmat(x);
  float *mp = dev(mean), *rp = dev(rstd);
  const cuda::XVec wp = xvec(w), bp = xvec(b);
  if (X.rows == 0) return;
  layernorm_forward_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(Y, mp, rp, X, wp, bp,
                                                                          eps);
  check_cuda(cudaGetLastError(), "layernorm_forward launch");
}
void CudaBackend::do_layernorm_backward(Tensor dx, Tensor dw, Tensor db, ConstTensor dy,
                                        ConstTensor x, ConstTensor w, ConstTensor mean,
                                        ConstTensor rstd) {
  const Timed timed(this, "layernorm_backward");
  const cuda::XMat DX = xmat(dx), DY = xmat(dy), X = xmat(x);
  const cuda::XVec wp = xvec(w);
  const float *mp = dev(mean), *rp = dev(rstd);
  float *dwp = dev(dw), *dbp = dev(db);
  if (X.rows == 0) return;
  layernorm_dx_kernel<<<unsigned(X.rows), cuda::kRowLanes, 0, s()>>>(DX, DY, X, wp, mp, rp);
  check_cuda(cudaGetLastError(), "layernorm_backward launch");
  launch_column_sums(dwp, X.cols, [=] __device__(int64_t c, int lane, int lanes) {
    return cuda::layernorm_dw_part(DY, X, mp, rp, c, lane, lanes);
  });
  launch_column_sums(dbp, X.cols, [=] __device__(int64_t c, int lane, int lanes) {
    return cuda::bias_backward_part(DY, c, lane, lanes);
  });
}

}  // namespace memo::cuda_impl
