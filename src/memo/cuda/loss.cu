// The CUDA backend's loss kernels (backend_impl.cuh; math: cpu/kernels.h): the cross-entropy a
// block of lanes a row (Note [Row lanes] in cuda/bodies.h), the vocabulary-parallel one a thread
// a row.
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {
static_assert(cuda::kIgnoredTarget == memo::kIgnoredTarget);
namespace {

__device__ void row_max_tree(float* a, int lane) {
  __syncthreads();
  for (int half = cuda::kRowLanes / 2; half > 0; half /= 2) {
    if (lane < half) cuda::row_tree_max(a, lane, half);
    __syncthreads();
  }
}
__global__ void cross_entropy_kernel(float* losses, Mat dlogits, CMat logits,
                                     const int32_t* targets, float grad_scale) {
  __shared__ float mx[cuda::kRowLanes];
  __shared__ double a[cuda::kRowLanes];
  const int64_t t = blockIdx.x;
  const int lane = int(threadIdx.x);
  const int32_t y = targets[t];
  if (y == cuda::kIgnoredTarget)  // not counted (the whole block returns, before any barrier)
    return cuda::ce_ignored_part(losses, dlogits, t, lane, cuda::kRowLanes);
  const float target_logit = logits.at(t, y);  // read before any lane writes (dlogits may alias)
  mx[lane] = cuda::ce_max_part(logits, t, lane, cuda::kRowLanes);
  row_max_tree(mx, lane);
  const float m = mx[0];
  a[lane] = cuda::ce_sum_part(logits, t, m, lane, cuda::kRowLanes);
  row_sum_tree(a, lane);
  const double sum = a[0];
  if (lane == 0) losses[t] = cuda::ce_loss(m, sum, target_logit);
  if (dlogits.p != nullptr)
    cuda::ce_grad_part(dlogits, logits, t, m, sum, y, grad_scale, lane, cuda::kRowLanes);
}

}  // namespace

void CudaBackend::do_cross_entropy(Tensor losses, Tensor dlogits, ConstTensor logits,
                                   View<const int32_t> targets, float grad_scale) {
  const Timed timed(this, "cross_entropy");
  const int32_t* ys = device_ids(targets);
  const Mat DL = mat(dlogits);
  const CMat L = cmat(logits);
  float* lp = dev(losses);
  if (L.rows == 0) return;
  cross_entropy_kernel<<<unsigned(L.rows), cuda::kRowLanes, 0, s()>>>(lp, DL, L, ys, grad_scale);
  check_cuda(cudaGetLastError(), "cross_entropy launch");
}
void CudaBackend::do_vocab_parallel_ce_stats(Tensor stats, Tensor target_logit, ConstTensor logits,
                                             View<const int32_t> targets) {
  const Timed timed(this, "vocab_parallel_ce_stats");
  const int32_t* ys = device_ids(targets);
  const CMat L = cmat(logits);
  float* sp = dev(stats);
  float* tp = dev(target_logit);
  launch(L.rows,
         [=] __device__(int64_t t) { cuda::vocab_parallel_ce_stats_row(sp, tp, L, ys, t); });
}
void CudaBackend::do_vocab_parallel_ce(Tensor losses, Tensor dlogits, ConstTensor logits,
                                       View<const int32_t> targets, ConstTensor stats,
                                       ConstTensor target_logit, float grad_scale) {
  const Timed timed(this, "vocab_parallel_ce");
  const int32_t* ys = device_ids(targets);
  const Mat DL = mat(dlogits);
  const CMat L = cmat(logits);
  const float* sp = dev(stats);
  const float* tp = dev(target_logit);
  const int64_t ranks = stats.rows() / 2;
  float* lp = dev(losses);
  launch(L.rows, [=] __device__(int64_t t) {
    cuda::vocab_parallel_ce_row(lp, DL, L, ys, sp, ranks, tp, grad_scale, t);
  });
}

}  // namespace memo::cuda_impl
