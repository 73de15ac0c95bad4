// The CUDA backend's merge of two attention parts over one set of queries (backend_impl.cuh;
// math: cpu/attention_merge.cc): a thread a (row, head).
#include "memo/cuda/backend_impl.cuh"

namespace memo::cuda_impl {

void CudaBackend::do_attention_merge(Tensor o, Tensor lse, ConstTensor o_part,
                                     ConstTensor lse_part) {
  const Timed timed(this, "attention_merge");
  const int64_t H = lse.dim(1), S = lse.dim(2), D = o.cols() / H;
  const Mat O = mat(o);
  const CMat P = cmat(o_part);
  float* lp = dev(lse);
  const float* lpp = dev(lse_part);
  launch(O.rows * H, [=] __device__(int64_t i) {
    cuda::attention_merge_item(O, lp, P, lpp, H, S, D, i / H, i % H);
  });
}

}  // namespace memo::cuda_impl
